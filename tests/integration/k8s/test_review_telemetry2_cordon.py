"""Review (telemetry2): the node release's cordon (adapters/kubernetes/reclaim.py ``apply_release``) against an
administrator's own cordon, on the real API server (kube-apiserver v1.20.2 of the session's fixture)."""

from __future__ import annotations

import uuid

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.reclaim import apply_drain, apply_release
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.autoscale.node_rules import rent_or_buy_hold_s
from gpufleet.autoscale.nodes_payoff import LOOP_DELAY_WEIGHT, MIN_BILLING_S
from gpufleet.control.reclaim import NodeDrain
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, wait_for
from tests.integration.k8s.test_node_release import FakeClock, _decided, _exists


def _admin_cordons(kube: Kube, node: str) -> None:
    """What ``kubectl cordon`` sends."""
    kube.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})


def _unschedulable(kube: Kube, node: str) -> bool:
    return bool(kube.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable", False))


def _pod_on(kube: Kube, ns: str, node: str) -> None:
    body = pod_body("late", PodRequest("x", 1000, 1024, 1, 1000), "none", labels={"gpufleet.io/kind": "training"})
    body["spec"]["nodeName"] = node
    create_pod(kube, ns, body)


def _running_on(kube: Kube, ns: str, prefix: str, nodes: tuple[str, ...]) -> None:
    """One pod ``{prefix}-{node}`` bound to each node, running."""
    for node in nodes:
        body = pod_body(f"{prefix}-{node}", PodRequest("x", 1000, 1024, 1, 1000), "none")
        body["spec"]["nodeName"] = node
        create_pod(kube, ns, body)
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)


def test_a_release_that_finds_the_node_busy_keeps_an_admins_cordon(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (fixed), the defect: between the planner's observation and ``apply_release`` an administrator cordoned the
    node (to drain it for maintenance) and a pod was bound to it. ``apply_release`` sent its own cordon (a no-op:
    already unschedulable), found the pod, and uncordoned the node (``node_busy``): the administrator's cordon was
    undone and new pods landed on a node being taken out of service. A release now acts only on a node that is
    schedulable when it comes to it, marks its cordon as gpufleet's (annotation ``gpufleet.io/cordoned-by``) and
    undoes only a cordon that still carries its mark."""
    node = f"cd{uuid.uuid4().hex[:5]}-idle"
    kubelet.register([FakeNode(node)])
    kubelet.start()
    _pod_on(kube, ns, node)
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    _admin_cordons(kube, node)
    act = Actuator(kube)
    out = apply_release(act, _decided(node))
    assert _unschedulable(kube, node) and _exists(kube, node)  # the administrator's cordon stands
    assert out == "cordoned_by_other"
    assert not any(a["action"] == "uncordon" and a["outcome"] == "applied" for a in act.audit)


def test_an_idle_node_an_admin_cordoned_is_not_released(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (fixed), the defect: the planner offers only schedulable nodes, but an administrator may cordon one after the
    observation (to look at it, to keep it); ``apply_release`` cordoned it again and deleted it. A node cordoned by
    someone else is not gpufleet's to release: ``cordoned_by_other``, nothing written."""
    node = f"cd{uuid.uuid4().hex[:5]}-idle"
    kubelet.register([FakeNode(node)])
    _admin_cordons(kube, node)
    act = Actuator(kube)
    out = apply_release(act, _decided(node))
    assert _exists(kube, node) and _unschedulable(kube, node)
    assert out == "cordoned_by_other"


def test_gpufleets_own_cordon_is_marked_and_undone_when_the_node_turns_out_busy(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    node = f"cd{uuid.uuid4().hex[:5]}-busy"
    kubelet.register([FakeNode(node)])
    kubelet.start()
    _pod_on(kube, ns, node)
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    act = Actuator(kube)
    assert apply_release(act, _decided(node)) == "node_busy"
    got = kube.get(f"/api/v1/nodes/{node}")
    assert not got["spec"].get("unschedulable", False)
    assert "gpufleet.io/cordoned-by" not in (got["metadata"].get("annotations") or {})


def test_a_drain_that_stops_keeps_an_admins_cordon_and_undoes_its_own(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (fixed), the defect, the same in the consolidation's drain (``apply_drain``): a drain whose checkpoint
    is not confirmed in time uncordoned the node, an administrator's cordon included. Now the drain goes on over
    a node someone else cordoned and leaves that cordon; its own cordon it undoes, mark and all."""
    p = f"cd{uuid.uuid4().hex[:5]}"
    admin, own = f"{p}-admin", f"{p}-own"
    kubelet.register([FakeNode(admin), FakeNode(own)])
    kubelet.start()
    _running_on(kube, ns, "ckpt", (admin, own))
    _admin_cordons(kube, admin)
    act = Actuator(kube)
    for node in (admin, own):
        drain = NodeDrain(node, (f"{ns}/ckpt-{node}",), (f"{ns}/ckpt-{node}",), 1, "test")
        assert apply_drain(act, drain, checkpoint_timeout_s=0.3, poll_s=0.1) == "checkpoint_timeout"
    assert _unschedulable(kube, admin)
    got = kube.get(f"/api/v1/nodes/{own}")
    assert not got["spec"].get("unschedulable", False)
    assert "gpufleet.io/cordoned-by" not in (got["metadata"].get("annotations") or {})


def test_a_node_the_consolidation_drained_is_released_in_the_end(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (fixed), the defect: consolidation (``--consolidate-every-s``) cordons an underused node and evicts
    its pods; on success it leaves the node cordoned and empty. The node release (``--release-every-s``) offered
    only uncordoned nodes, and the fleet spec's ``release: gpufleet`` set Karpenter's ``consolidateAfter: Never``
    on the launched NodePools: nobody ever deleted or used the drained node, a paid GPU node for good (the same
    for a node whose release was cut between its cordon and its delete: a crash, a lost Lease). Now the
    observation carries gpufleet's cordon mark (``ObservedNode.cordoned_by``) and the release round treats such a
    parked node, empty, as an idle node: after the scaler's minimum idle time it is either released or, kept by
    the scaler's rent-or-buy hold, uncordoned (then released at the break-even as any idle node)."""
    node = f"cd{uuid.uuid4().hex[:5]}-drained"
    kubelet.register([FakeNode(node)])
    kubelet.start()
    _pod_on(kube, ns, node)
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    act = Actuator(kube)
    assert apply_drain(act, NodeDrain(node, (f"{ns}/late",), (), 1)) == "drained"
    assert wait_for(lambda: not pods_in(kube, ns), 30)
    clock = FakeClock()
    ctl = Controller(kube, ControllerConfig(release_every_s=60, node_start_s=600), clock=clock).start()
    try:
        assert wait_for(lambda: node in {n.name for n in ctl.view.observation().nodes}, 30)
        buy_s = rent_or_buy_hold_s(600, MIN_BILLING_S, LOOP_DELAY_WEIGHT, 1.0)
        start = clock.t
        released: list[str] = []
        while node not in released and clock.t - start < 3 * buy_s:
            released += [r.node for r, out in ctl.maybe_release() if out == "released"]
            clock.t += 60
    finally:
        ctl.stop()
        ctl.view.stop()
    assert node in released and not _exists(kube, node)
    # first kept by the scaler's rent-or-buy hold: uncordoned (usable), then released as an ordinary idle node
    assert [u.reason for u, out in ctl.uncordon_results if u.node == node and out == "applied"] == [
        "held_by_node_scaler"
    ]


def _rounds(ctl: Controller, clock: FakeClock, span_s: float, step_s: float = 60) -> list[str]:
    """Release rounds every ``step_s`` of the controller's clock for ``span_s``; the nodes released."""
    released: list[str] = []
    start = clock.t
    while clock.t - start < span_s:
        released += [r.node for r, out in ctl.maybe_release() if out == "released"]
        clock.t += step_s
    return released


def test_a_release_cut_between_its_cordon_and_its_delete_is_finished_by_the_next_controller(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (fixed), the defect: a release cordons the node (gpufleet's mark) and then deletes it; a controller that
    crashed (or lost its Lease) in between left the node cordoned and idle, and the next controller never offered
    it again (cordoned), nor did Karpenter (``consolidateAfter: Never``). Now the next controller reads the mark:
    the parked, empty node is held no longer than any idle node (not before the scaler's minimum idle time:
    no churn) and released in the end."""
    node = f"cd{uuid.uuid4().hex[:5]}-cut"
    kubelet.register([FakeNode(node)])
    kubelet.start()
    assert Actuator(kube).cordon_own(node, "unneeded_below_threshold") == "applied"  # the crashed release's cordon
    clock = FakeClock()
    ctl = Controller(kube, ControllerConfig(release_every_s=60, node_start_s=600), clock=clock).start()
    try:
        assert wait_for(lambda: node in {n.name for n in ctl.view.observation().nodes if n.own_cordon}, 30)
        released = _rounds(ctl, clock, 540)  # within the minimum idle time (600 s): left as it is
        assert node not in released and _unschedulable(kube, node)
        buy_s = rent_or_buy_hold_s(600, MIN_BILLING_S, LOOP_DELAY_WEIGHT, 1.0)
        released += _rounds(ctl, clock, 3 * buy_s)
    finally:
        ctl.stop()
        ctl.view.stop()
    assert node in released and not _exists(kube, node)


def test_admin_cordons_are_never_touched_and_gpufleets_own_on_a_busy_node_expires(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (fixed), the rule's other half: an administrator's cordon (no ``gpufleet.io/cordoned-by``), on an
    empty node or a busy one, is never released nor undone, however long it stands; gpufleet's own cordon on a
    node that still runs work (a drain cut short) is undone once parked ``OWN_CORDON_GRACE_S`` (900 s), not before."""
    p = f"cd{uuid.uuid4().hex[:5]}"
    idle_admin, busy_admin, busy_own = f"{p}-idle-admin", f"{p}-busy-admin", f"{p}-busy-own"
    kubelet.register([FakeNode(idle_admin), FakeNode(busy_admin), FakeNode(busy_own)])
    kubelet.start()
    _running_on(kube, ns, "w", (busy_admin, busy_own))
    _admin_cordons(kube, idle_admin)
    _admin_cordons(kube, busy_admin)
    assert Actuator(kube).cordon_own(busy_own, "test_drain") == "applied"  # a drain that crashed before evicting
    clock = FakeClock()
    ctl = Controller(kube, ControllerConfig(release_every_s=60, node_start_s=600), clock=clock).start()
    try:
        assert wait_for(lambda: busy_own in {n.name for n in ctl.view.observation().nodes if n.own_cordon}, 30)
        released = _rounds(ctl, clock, 840)
        assert _unschedulable(kube, busy_own)  # within the grace: a drain may still be at it
        buy_s = rent_or_buy_hold_s(600, MIN_BILLING_S, LOOP_DELAY_WEIGHT, 1.0)
        released += _rounds(ctl, clock, 3 * buy_s)
    finally:
        ctl.stop()
        ctl.view.stop()
    assert not {idle_admin, busy_admin, busy_own} & set(released)
    for node in (idle_admin, busy_admin):
        assert _exists(kube, node) and _unschedulable(kube, node)
        assert "gpufleet.io/cordoned-by" not in (kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {})
        assert not any(a["target"] == node for a in ctl.act.audit)
    got = kube.get(f"/api/v1/nodes/{busy_own}")
    assert not got["spec"].get("unschedulable", False)
    assert "gpufleet.io/cordoned-by" not in (got["metadata"].get("annotations") or {})
    mine = [(u.reason, out) for u, out in ctl.uncordon_results if u.node == busy_own]
    assert [r for r, out in mine if out == "applied"] == ["own_cordon_expired"]
    # a round whose observation lags the uncordon asks again: the mark is checked on the API server, nothing written
    assert {out for _, out in mine} <= {"applied", "not_ours"}
