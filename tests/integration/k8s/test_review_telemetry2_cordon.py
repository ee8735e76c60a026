"""Review (telemetry2): the node release's cordon (adapters/kubernetes/reclaim.py ``apply_release``) against an
administrator's own cordon, on the real API server (kube-apiserver v1.20.2 of the session's fixture)."""

from __future__ import annotations

import uuid

import pytest

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
    for node in (admin, own):
        body = pod_body(f"ckpt-{node}", PodRequest("x", 1000, 1024, 1, 1000), "none")
        body["spec"]["nodeName"] = node
        create_pod(kube, ns, body)
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    _admin_cordons(kube, admin)
    act = Actuator(kube)
    for node in (admin, own):
        drain = NodeDrain(node, (f"{ns}/ckpt-{node}",), (f"{ns}/ckpt-{node}",), 1, "test")
        assert apply_drain(act, drain, checkpoint_timeout_s=0.3, poll_s=0.1) == "checkpoint_timeout"
    assert _unschedulable(kube, admin)
    got = kube.get(f"/api/v1/nodes/{own}")
    assert not got["spec"].get("unschedulable", False)
    assert "gpufleet.io/cordoned-by" not in (got["metadata"].get("annotations") or {})


@pytest.mark.xfail(
    strict=True,
    reason="design: a node the consolidation drained stays cordoned and the release offers only uncordoned nodes; "
    "fixing it needs the observation to carry gpufleet's cordon mark and a rule for what a drained node becomes "
    "(released by the scaler's rules, or uncordoned when it holds it), which the parity with the simulator must cover",
)
def test_a_node_the_consolidation_drained_is_released_in_the_end(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (not fixed), the defect: consolidation (``--consolidate-every-s``) cordons an underused node and evicts
    its pods; on success it leaves the node cordoned and empty. The node release (``--release-every-s``) offers
    only uncordoned nodes, and the fleet spec's ``release: gpufleet`` set Karpenter's ``consolidateAfter: Never``
    on the launched NodePools: nobody ever deletes or uses the drained node, a paid GPU node for good (the same
    for a node whose release was cut between its cordon and its delete: a crash, a lost Lease)."""
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
    assert node in released or not _unschedulable(kube, node)
