"""Review (k8s): a controller that loses the Lease and later takes it back, while another controller led meanwhile
(two controllers against the real API server, one shared fake clock)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.reclaim import apply_drain
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.control.reclaim import NodeDrain
from gpufleet.control.replicas import ScaleDecision
from gpufleet.schedule.table import PodRequest
from tests.integration import promserver
from tests.integration.k8s.helpers import create_pod, pod_body, wait_for
from tests.integration.k8s.test_node_release import FakeClock
from tests.integration.k8s.test_review_serving2_scaling import (
    OPT_IN,
    SPAN_S,
    T0,
    _deployment,
    _openmetrics,
    _replicas,
    _scales,
)

LEASE_S = 300  # longer than the steps a leader takes on the fake clock without renewing


@pytest.fixture
def prometheus_url(ns: str, tmp_path: Path) -> Iterator[str]:
    assert promserver.available(), promserver.SKIP_REASON
    with promserver.prometheus_over(tmp_path, _openmetrics(ns)) as url:
        yield url


def _controller(kube: Kube, ns: str, ident: str, clock: FakeClock) -> Controller:
    cfg = ControllerConfig(namespace=ns, lease_name="regain", identity=ident, lease_duration_s=LEASE_S,
                           release_every_s=60, node_start_s=600, buffer_pods=False)  # fmt: skip
    return Controller(kube, cfg, clock=clock).start()


def _on(ctl: Controller, node: str) -> int:
    return len([p for p in ctl.view.observation().pods if p.node == node and p.active])


def _idle_mark(ctl: Controller, node: str) -> float | None:
    got = [n.idle_s for n in ctl.view.observation().nodes if n.name == node]
    return got[0] if got else None


def test_a_controller_that_regains_the_lease_reads_the_idle_spells_from_the_nodes(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (fixed), the defect: the node release's watch (idle spells, parked nodes, its node scaler's state, the
    idle marks written) lived as long as the controller, not as long as its lead. A controller that lost the Lease
    and took it back went on from its old watch: a node it had seen idle before, that the other leader's work used
    meanwhile and that went idle again only minutes ago, counted as idle since the first spell, and was released at
    once (here: idle 680 s by the node's mark, 3200 s by the stale memory, against a 3060 s rent-or-buy hold). Now
    the Lease elector counts terms, and in a new term the release starts afresh from the node marks
    (``gpufleet.io/idle-since``, ``parked-at``) as a new leader does; audited ``lease`` ``lead_regained``."""
    node = f"rg{uuid.uuid4().hex[:5]}-gpu"
    kubelet.register([FakeNode(node)])
    kubelet.start()
    clock = FakeClock()
    a, b = _controller(kube, ns, "a", clock), _controller(kube, ns, "b", clock)
    try:
        for c in (a, b):
            assert wait_for(lambda c=c: any(n.name == node for n in c.view.observation().nodes), 30)  # type: ignore[misc]
        t0 = clock.t
        assert a.elector.try_acquire_or_renew() and not b.elector.try_acquire_or_renew()
        a.maybe_release()  # a watches the node idle from t0
        assert a.releaser is not None and abs(a.releaser.idle_marks()[node] - t0) <= 1
        # a stalls (no renewal) past its Lease; b takes over and the node is used, then idle again
        clock.t = t0 + 2400
        assert b.elector.try_acquire_or_renew() and not a.elector.is_leader()
        body = pod_body("job", PodRequest("x", 1000, 1024, 1, 1000), "none", labels={"gpufleet.io/kind": "training"})
        body["spec"]["nodeName"] = node
        create_pod(kube, ns, body)
        assert wait_for(lambda: _on(b, node) == 1, 30)
        b.maybe_release()
        assert b.releaser is not None and node not in b.releaser.idle_marks()
        kube.delete(f"/api/v1/namespaces/{ns}/pods/job?gracePeriodSeconds=0")
        assert wait_for(lambda: _on(b, node) == 0, 30)
        clock.t = t0 + 2520
        b.maybe_release()  # idle again from t0 + 2520: the mark on the node says so
        assert wait_for(lambda: (_idle_mark(a, node) or 0) >= t0 + 2519, 30)
        b.elector.release()
        # a takes the Lease back: the node has been idle 680 s, not 3200 s (the rent-or-buy hold is 3060 s)
        clock.t = t0 + 3200
        assert a.elector.try_acquire_or_renew()
        released = a.maybe_release()
        assert [r.node for r, _ in released] == []
        assert a.releaser is not None and abs(a.releaser.idle_marks()[node] - (t0 + 2520)) <= 1
    finally:
        for c in (a, b):
            c.stop()
            c.view.stop()


def test_a_controller_that_regains_the_lease_does_not_hold_the_other_leaders_scale(
    kube: Kube, ns: str, prometheus_url: str
) -> None:
    """Review (fixed), the defect: replica scaling kept the replicas it last wrote (and its holds and policies) across
    a lost and regained Lease. The other leader's scale in between (gpufleet's own decision) differed from the
    stale last write, so the returning leader audited it ``scaled_by_other`` and held the Deployment for 10 minutes
    (longer on each recurrence) as if a human had scaled it. Now a new term drops that memory (last writes, holds,
    policies, warmed again from the rate history), as a new leader starts."""
    _deployment(kube, ns, "llm", 2, OPT_IN)
    clock = [float(T0 + SPAN_S - 600)]  # the series run to T0 + SPAN_S

    def ctl(ident: str) -> Controller:
        cfg = ControllerConfig(namespace=ns, lease_name="regain-scale", identity=ident, lease_duration_s=LEASE_S,
                               scale_every_s=60.0, prometheus_url=prometheus_url, react_every_s=0)  # fmt: skip
        c = Controller(kube, cfg, clock=lambda: clock[0]).start()
        assert wait_for(lambda: any((d.namespace, d.name) == (ns, "llm") for d in c.view.observation().deployments))
        return c

    a, b = ctl("a"), ctl("b")
    try:
        assert a.elector.try_acquire_or_renew()
        a.maybe_scale()
        wrote = _replicas(kube, ns, "llm")
        assert wrote >= 6
        clock[0] += 60 + LEASE_S  # a stalls past its Lease; b leads and scales (its policy's decision)
        assert b.elector.try_acquire_or_renew() and not a.elector.is_leader()
        assert b.scaling is not None
        b.scaling._apply(ScaleDecision(ns, "llm", current=wrote, desired=wrote + 2, reason="forecast"))
        assert _replicas(kube, ns, "llm") == wrote + 2
        assert wait_for(lambda: [d.replicas for d in a.view.observation().deployments
                                 if (d.namespace, d.name) == (ns, "llm")] == [wrote + 2])  # fmt: skip
        b.elector.release()
        clock[0] += 60
        assert a.elector.try_acquire_or_renew()
        a.maybe_scale()  # gpufleet's own replicas (b's write): decided, not held as someone else's
        assert [x for x in _scales(a, ns, "llm") if x["reason"] == "scaled_by_other"] == []
        assert _scales(a, ns, "llm")[-1]["outcome"] in ("applied", "unchanged")
    finally:
        for c in (a, b):
            c.stop()
            c.view.stop()


def test_a_drain_in_flight_when_the_lease_is_lost_writes_nothing(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (fixed), the defect: only a bind checked the Lease before it was sent; a consolidation drain or a
    preemption (threads that wait up to the checkpoint timeout before they evict) and a scaling round (on its worker,
    reading a slow Prometheus) went on cordoning, evicting and scaling after the controller had lost the Lease, while
    the new leader acted: two leaders writing. Now the controller's Actuator refuses every write while it does not
    lead (outcome ``not_leader``); the drain stops (``failed``) with nothing written."""
    node = f"dr{uuid.uuid4().hex[:5]}-gpu"
    kubelet.register([FakeNode(node)])
    kubelet.start()
    body = pod_body("job", PodRequest("x", 1000, 1024, 1, 1000), "none", labels={"gpufleet.io/kind": "training"})
    body["spec"]["nodeName"] = node
    create_pod(kube, ns, body)
    clock = FakeClock()
    a, b = _controller(kube, ns, "a", clock), _controller(kube, ns, "b", clock)
    try:
        assert a.elector.try_acquire_or_renew()
        # a's consolidation decided to drain the node and its thread waits on a checkpoint; meanwhile a stalls past
        # its Lease and b takes over
        clock.t += LEASE_S + 1
        assert b.elector.try_acquire_or_renew() and not a.elector.is_leader()
        out = apply_drain(a.act, NodeDrain(node, (f"{ns}/job",), (), 1), checkpoint_timeout_s=0)
        assert out == "failed"
        assert kube.get(f"/api/v1/namespaces/{ns}/pods/job")["metadata"].get("deletionTimestamp") is None
        assert not kube.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable", False)
        assert [r["outcome"] for r in a.act.audit if r["action"] == "cordon"] == ["not_leader"]
    finally:
        for c in (a, b):
            c.stop()
            c.view.stop()
