"""The start buffer's top-up on the real API server (control/buffer_pods.py, adapters/kubernetes/bufferpods.py):
with a buffer of one node and none free, the controller creates the gpufleet-buffer PriorityClass and one
placeholder pod (a whole node's GPUs of the product, its nodeSelector, priority -10, preemption policy Never, the
controller's scheduler); a pending placeholder counts as the node starting (no second one); once a node joins
gpufleet's binder binds the placeholder there and a real pod that needs the node preempts it (eviction) and
binds; the buffer tops up again, and when it goes to 0 the placeholder is deleted. A placeholder of the product's
spot lane (``spot_lane(product)``) selects spot nodes and tolerates the spot taint: it reads back so, and the binder
binds it on the spot node, not on a free on-demand one."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpufleet.adapters.kubernetes.bufferpods import PRIORITY, PRIORITY_CLASS, SPOT_TOLERATION
from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.fleetobjects import SPOT_TAINT
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.control.buffer_pods import placeholder_lane
from gpufleet.control.start_buffer import BufferDecision, StartBuffer, spot_lane
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, wait_for


class Want:
    """The start buffer's decision, set by the test: ``want`` nodes of ``product`` (the loop's own StartBuffer keeps
    its launch rule; a subclass of it cannot be made where it is compiled)."""

    def __init__(self, product: str, want: int) -> None:
        self.product, self.want = product, want


class FakeClock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def _controller(
    kube: Kube, cfg: ControllerConfig, clock: FakeClock, product: str, want: int
) -> tuple[Controller, Want]:
    ctl = Controller(kube, cfg, clock=clock).start()
    assert ctl.releaser is not None and isinstance(ctl.releaser.buffer, StartBuffer)  # the loop's start buffer
    return ctl, Want(product, want)


def _round(ctl: Controller, clock: FakeClock, w: Want) -> None:
    """One release round with the test's decision (the buffer does not step on its own this round)."""
    r = ctl.releaser
    assert r is not None
    r._buffer_at = clock()
    r.buffer_decisions[w.product] = BufferDecision(w.want, 0.5, f"start_buffer: test, {w.want} node(s)")
    ctl.maybe_release()
    clock.t += 60


def _seen(ctl: Controller, node: str) -> bool:
    """The controller sees ``node`` with its GPUs and a pod bound to it."""
    o = ctl.view.observation()
    return any(n.name == node and n.spec.gpu_count for n in o.nodes) and any(p.node == node for p in o.pods)


def _holders(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return [p for p in pods_in(kube, ns) if (p["metadata"].get("labels") or {}).get("gpufleet.io/buffer") == "true"
            and not p["metadata"].get("deletionTimestamp")]  # fmt: skip


@contextmanager
def _running(kube: Kube, sched: str, ns: str) -> Iterator[Controller]:
    """gpufleet's controller running in a thread (binding, preempting) while the block runs."""
    cfg = ControllerConfig(scheduler_name=sched, namespace=ns, lease_name=f"l-{sched}", preempt_grace_s=0)
    runner = Controller(kube, cfg).start()
    t = threading.Thread(target=runner.run, daemon=True)
    t.start()
    try:
        yield runner
    finally:
        runner.stop()
        t.join(timeout=30)


def _busy_node(kube: Kube, kubelet: FakeKubelet, ns: str, prefix: str) -> tuple[str, str, str, str, ControllerConfig]:
    """A node of a product of this test's own, busy with a training pod, and the controller's config: (suffix,
    product, node, scheduler name, config)."""
    suffix = uuid.uuid4().hex[:5]
    product = f"TEST-GPU-{suffix}"  # a product of this test's nodes only
    busy = f"{prefix}{suffix}-busy"
    kubelet.register([FakeNode(busy, product=product)])
    kubelet.start()
    body = pod_body("train", PodRequest("x", 1000, 1024, 8, 1000), "none", labels={"gpufleet.io/kind": "training"})
    body["spec"]["nodeName"] = busy
    create_pod(kube, ns, body)
    sched = f"gpufleet-{suffix}"
    cfg = ControllerConfig(scheduler_name=sched, namespace=ns, lease_name=f"l-{sched}", release_every_s=60,
                           node_start_s=600, preempt_grace_s=0)  # fmt: skip
    return suffix, product, busy, sched, cfg


def test_the_controller_tops_up_the_buffer_with_a_placeholder_a_real_pod_preempts(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    suffix, product, busy, sched, cfg = _busy_node(kube, kubelet, ns, "buf")
    fresh = f"buf{suffix}-new"
    clock = FakeClock()
    ctl, w = _controller(kube, cfg, clock, product, want=1)
    try:
        assert wait_for(lambda: _seen(ctl, busy), 30)
        _round(ctl, clock, w)
        pc = kube.get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{PRIORITY_CLASS}")
        assert pc["value"] == PRIORITY and pc["preemptionPolicy"] == "Never" and not pc.get("globalDefault")
        (ph,) = _holders(kube, ns)
        spec = ph["spec"]
        assert spec["priority"] == PRIORITY and spec["preemptionPolicy"] == "Never"
        assert spec["priorityClassName"] == PRIORITY_CLASS and spec["schedulerName"] == sched
        assert spec["nodeSelector"] == {"nvidia.com/gpu.product": product}
        assert not [t for t in spec.get("tolerations") or [] if t.get("key") == "gpufleet.io/spot"]  # not spot
        res = spec["containers"][0]["resources"]
        assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "8"
        assert ph["metadata"]["labels"]["gpufleet.io/product"] == product
        assert wait_for(lambda: any(p.buffer for p in ctl.view.observation().pods), 30)
        _round(ctl, clock, w)  # pending: its node is starting, no second placeholder
        assert len(_holders(kube, ns)) == 1
    finally:
        ctl.stop()
        ctl.view.stop()

    # Karpenter's node for the placeholder joins; gpufleet's binder binds the placeholder there; a real pod takes it
    kubelet.register([FakeNode(fresh, product=product)])
    with _running(kube, sched, ns) as runner:
        assert wait_for(lambda: [p["spec"].get("nodeName") for p in _holders(kube, ns)] == [fresh], 30)
        create_pod(kube, ns, pod_body("real", PodRequest("x", 1000, 1024, 8, 1000), sched))
        real = f"/api/v1/namespaces/{ns}/pods/real"
        assert wait_for(lambda: kube.get(real)["spec"].get("nodeName") == fresh, 60), runner.act.audit
        assert _holders(kube, ns) == []
        (d,) = runner.preemptions
        assert [v.pod for v in d.victims] == [f"{ns}/{ph['metadata']['name']}"] and d.lost_gpu_h == 0

    # the buffer is used up: it tops up again; at 0 nodes the placeholder goes
    ctl, w = _controller(kube, cfg, clock, product, want=1)
    try:
        assert wait_for(lambda: _seen(ctl, fresh), 30)
        _round(ctl, clock, w)
        assert len(_holders(kube, ns)) == 1
        assert wait_for(lambda: any(p.buffer for p in ctl.view.observation().pods), 30)
        w.want = 0
        _round(ctl, clock, w)
        assert wait_for(lambda: _holders(kube, ns) == [], 30)
        acts = [(a["action"], a["outcome"]) for a in ctl.act.audit if a["reason"].startswith("start_buffer_top_up")]
        assert acts == [("buffer_pod_create", "applied"), ("delete_pod", "applied")]
    finally:
        ctl.stop()
        ctl.view.stop()


def test_a_spot_lane_placeholder_selects_spot_tolerates_its_taint_and_binds_on_the_spot_node(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    suffix, product, busy, sched, cfg = _busy_node(kube, kubelet, ns, "bsp")
    od, spot = f"bsp{suffix}-od", f"bsp{suffix}-spot"
    clock = FakeClock()
    ctl, w = _controller(kube, cfg, clock, spot_lane(product), want=1)  # the decision of the spot lane's key
    try:
        assert wait_for(lambda: _seen(ctl, busy), 30)
        _round(ctl, clock, w)
        (ph,) = _holders(kube, ns)
        spec, meta = ph["spec"], ph["metadata"]
        assert spec["nodeSelector"] == {"nvidia.com/gpu.product": product, "karpenter.sh/capacity-type": "spot"}
        assert SPOT_TOLERATION in spec["tolerations"]
        assert spec["priority"] == PRIORITY and spec["preemptionPolicy"] == "Never"
        assert spec["priorityClassName"] == PRIORITY_CLASS and spec["schedulerName"] == sched
        assert meta["labels"]["gpufleet.io/buffer-lane"] == "spot" and meta["name"].startswith("gpufleet-buffer-spot-")
        assert wait_for(lambda: any(p.buffer for p in ctl.view.observation().pods), 30)
        (seen,) = [p for p in ctl.view.observation().pods if p.buffer]
        assert placeholder_lane(seen) == spot_lane(product) and seen.tolerates("gpufleet.io/spot=true:NoSchedule")
        _round(ctl, clock, w)  # pending: its spot node is starting, no second placeholder
        assert len(_holders(kube, ns)) == 1
        acts = [a["target"] for a in ctl.act.audit if a["action"] == "buffer_pod_create"]
        assert acts == [spot_lane(product)]
    finally:
        ctl.stop()
        ctl.view.stop()

    # a free on-demand node and Karpenter's spot node (tainted as gpufleet's spot NodePool taints it) join
    kubelet.register([FakeNode(od, product=product), FakeNode(spot, product=product, capacity_type="spot",
                                                              node_pool="spot")])  # fmt: skip
    kube.patch(f"/api/v1/nodes/{spot}", {"spec": {"taints": [SPOT_TAINT]}})
    with _running(kube, sched, ns):
        assert wait_for(lambda: [p["spec"].get("nodeName") for p in _holders(kube, ns)] == [spot], 30)

    ctl, w = _controller(kube, cfg, clock, spot_lane(product), want=0)
    try:
        assert wait_for(lambda: _seen(ctl, spot), 30)
        _round(ctl, clock, w)
        assert wait_for(lambda: _holders(kube, ns) == [], 30)
    finally:
        ctl.stop()
        ctl.view.stop()
