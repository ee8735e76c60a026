"""Review (k8snodes): start-buffer placeholders (control/buffer_pods.py, adapters/kubernetes/bufferpods.py) left by
an earlier run once the operator turns the top-up off (``gpufleet controller --release-every-s N --no-buffer-pods``)."""

from __future__ import annotations

import dataclasses

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.bufferpods import ensure_priority_class, placeholder
from gpufleet.adapters.kubernetes.controller import Controller
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet
from gpufleet.adapters.kubernetes.rest import Kube
from tests.integration.k8s.helpers import create_pod, wait_for
from tests.integration.k8s.test_buffer_pods import FakeClock, _busy_node, _holders


def test_placeholders_are_deleted_once_the_top_up_is_turned_off(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (fixed), the defect: the controller deletes placeholders only in the top-up step, which ``--no-buffer-
    pods`` skips entirely. Placeholders an earlier run created (the operator turns the top-up off after seeing what
    it costs) stay bound forever: each holds a whole GPU node (8 GPUs here) that the node release never offers (a
    node with a bound placeholder is busy) and Karpenter never empties. With the top-up off, gpufleet's own
    placeholders must go: the release round deletes them (the top-up's rule with no buffer wanted)."""
    _suffix, product, _busy, sched, cfg = _busy_node(kube, kubelet, ns, "off")
    assert ensure_priority_class(Actuator(kube)) in ("exists", "created")  # what an earlier run with the top-up on
    create_pod(kube, ns, placeholder(product, 8, ns, sched))  # created
    assert len(_holders(kube, ns)) == 1
    clock = FakeClock()
    ctl = Controller(kube, dataclasses.replace(cfg, buffer_pods=False), clock=clock).start()
    try:
        assert wait_for(lambda: any(p.buffer for p in ctl.view.observation().pods), 30)
        for _ in range(3):
            ctl.maybe_release()
            clock.t += 3600
        assert wait_for(lambda: _holders(kube, ns) == [], 10), [p["metadata"]["name"] for p in _holders(kube, ns)]
        placeholder_writes = [(a["action"], a["outcome"]) for a in ctl.act.audit if a["action"] == "buffer_pod_create"]
        assert placeholder_writes == []  # none created: the top-up is off
    finally:
        ctl.stop()
        ctl.view.stop()
