"""The controller releases idle launched GPU nodes with the loop's node scaler, on the real API server: an idle
on-demand node is held to the scaler's rent-or-buy break-even and then cordoned and deleted; a node with a pod
and a reserved node stay; a node that took a pod after the decision is uncordoned, not deleted; a dry run
writes nothing. A pending gang that its NodePool's GPU limit keeps from completing does not hold an idle node past
its break-even; a gang that can complete holds it; while training starts late the loop's start buffer keeps an idle
on-demand node."""

from __future__ import annotations

import time
import uuid

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.fleetobjects import TierCapacity, node_pool
from gpufleet.adapters.kubernetes.reclaim import apply_release
from gpufleet.adapters.kubernetes.rest import ApiError, Kube
from gpufleet.autoscale.node_rules import rent_or_buy_hold_s
from gpufleet.autoscale.nodes_payoff import LOOP_DELAY_WEIGHT, MIN_BILLING_S, PayoffAwareNodes
from gpufleet.control.node_release import NodeRelease
from gpufleet.control.observation import ObservedNodePool
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, wait_for


class FakeClock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def _exists(kube: Kube, node: str) -> bool:
    try:
        kube.get(f"/api/v1/nodes/{node}")
    except ApiError as exc:
        assert exc.status == 404
        return False
    return True


def _decided(node: str) -> NodeRelease:
    """A release as the planner would decide it (the node scaler's reason code for a node it lets go)."""
    return NodeRelease(node, "NVIDIA-H100-80GB-HBM3", "unneeded_below_threshold", 3600)


def _setup(kube: Kube, kubelet: FakeKubelet, ns: str) -> tuple[str, str, str]:
    p = f"rel{uuid.uuid4().hex[:5]}"
    idle, busy, reserved = f"{p}-idle", f"{p}-busy", f"{p}-res"
    kubelet.register([FakeNode(idle), FakeNode(busy),
                      FakeNode(reserved, capacity_type="reserved", node_pool="reserved")])  # fmt: skip
    kubelet.start()
    body = pod_body("train", PodRequest("x", 1000, 1024, 4, 1000), "none", labels={"gpufleet.io/kind": "training"})
    body["spec"]["nodeName"] = busy
    create_pod(kube, ns, body)
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    return idle, busy, reserved


def test_the_controller_releases_an_idle_launched_node_at_the_loops_break_even(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    idle, busy, reserved = _setup(kube, kubelet, ns)
    clock = FakeClock()
    ctl = Controller(kube, ControllerConfig(release_every_s=60, node_start_s=600), clock=clock).start()
    try:
        assert wait_for(lambda: {idle, busy, reserved} <= {n.name for n in ctl.view.observation().nodes}, 30)
        buy_s = rent_or_buy_hold_s(600, MIN_BILLING_S, LOOP_DELAY_WEIGHT, 1.0)
        released: list[tuple[NodeRelease, str]] = []
        start = clock.t
        while not any(r.node == idle for r, _ in released) and clock.t - start < 3 * buy_s:
            released += ctl.maybe_release()
            clock.t += 60
        mine = [(r, out) for r, out in released if r.node in (idle, busy, reserved)]
        assert [(r.node, out) for r, out in mine] == [(idle, "released")]
        assert buy_s <= mine[0][0].idle_for_s <= buy_s + 60  # held to the break-even by the scaler, not before
        assert wait_for(lambda: not _exists(kube, idle), 10)
        assert _exists(kube, busy) and _exists(kube, reserved)
        trail = [(a["action"], a["outcome"]) for a in ctl.act.audit if a["target"] == idle]
        # the idle spell's start written on the node when it began (gpufleet.io/idle-since, for a restarted controller)
        assert trail == [("mark_idle", "applied"), ("cordon", "applied"), ("delete_node", "applied")]
        assert all(a["reason"] == mine[0][0].reason for a in ctl.act.audit
                   if a["target"] == idle and a["action"] != "mark_idle")  # fmt: skip
    finally:
        ctl.stop()
        ctl.view.stop()


def test_a_node_that_took_a_pod_since_the_decision_is_uncordoned_and_kept(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    _idle, busy, _reserved = _setup(kube, kubelet, ns)
    act = Actuator(kube)
    assert apply_release(act, _decided(busy)) == "node_busy"
    assert _exists(kube, busy) and not kube.get(f"/api/v1/nodes/{busy}")["spec"].get("unschedulable", False)
    assert [(a["action"], a["outcome"]) for a in act.audit] == [
        ("cordon", "applied"), ("release", "stopped"), ("uncordon", "applied")
    ]  # fmt: skip
    dry = Actuator(kube, dry_run=True)
    assert apply_release(dry, _decided(_idle)) == "dry_run"
    assert _exists(kube, _idle) and not kube.get(f"/api/v1/nodes/{_idle}")["spec"].get("unschedulable", False)


def test_a_gang_its_nodepools_limit_keeps_from_completing_does_not_hold_an_idle_node(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    """gpufleet's NodePool limits the product to 160 GPUs (20 nodes, one of them up and idle). A pending gang of 20
    whole-node pods can complete (the idle node + 19 launchable): the idle node is held however long it idles. A
    gang of 32 cannot: it does not hold the idle node, which goes at the rent-or-buy break-even it has long passed
    once the loop's start buffer no longer asks for it (the gang waits, a late start: the buffer holds one node free
    first, as the simulator's would). The NodePool has a startup taint (a GPU operator's readiness taint) that the
    idle node, not yet initialised by Karpenter, still carries and the gang does not tolerate: the node counts for
    the gang all the same, as Karpenter counts it."""
    p = f"gang{uuid.uuid4().hex[:5]}"
    # its own product (priced as the H100 by the catalog's token match): the H100 NodePools other tests leave do
    # not launch it (a NodePool pinned to a product counts for the products whose name contains the pin)
    product = f"NVIDIA-H100-{p.upper()}-80GB-HBM3"
    pool = node_pool(TierCapacity(product, "on-demand", 160), consolidate_after="Never")
    startup = {"key": "nvidia.com/gpu-driver", "value": "starting", "effect": "NoSchedule"}
    pool["spec"]["template"]["spec"]["startupTaints"] = [startup]
    name = pool["metadata"]["name"]
    kube.post("/apis/karpenter.sh/v1/nodepools", pool)
    idle = f"{p}-idle"
    kubelet.register([FakeNode(idle, product=product, node_pool=name)])
    kube.patch(f"/api/v1/nodes/{idle}", {"spec": {"taints": [startup]}})  # Karpenter's, until the operator is up
    kubelet.start()
    sched = f"gpufleet-{p}"

    def gang(g: str, size: int) -> None:
        for i in range(size):
            body = pod_body(f"{g}-{i}", PodRequest("x", 1000, 1024, 8, 1000), sched,
                            labels={"gpufleet.io/pod-group": g}, annotations={"gpufleet.io/pod-group-min": str(size)})  # fmt: skip
            body["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": product}
            create_pod(kube, ns, body)

    gang("fits", 20)
    clock = FakeClock()
    cfg = ControllerConfig(scheduler_name=sched, release_every_s=60, node_start_s=600)
    ctl = Controller(kube, cfg, clock=clock).start()  # not run: no binding, only the release asked here
    try:
        assert wait_for(lambda: len([q for q in ctl.view.observation().pods if q.namespace == ns]) == 20, 30)
        seen = ctl.view.observation().node_pools or ()
        driver = "nvidia.com/gpu-driver=starting:NoSchedule"
        assert ObservedNodePool(name, 160, (product,), ("on-demand",), gpu=True, startup_taints=(driver,)) in seen
        assert [n.spec.taints for n in ctl.view.observation().nodes if n.name == idle] == [(driver,)]
        buy_s = rent_or_buy_hold_s(600, MIN_BILLING_S, LOOP_DELAY_WEIGHT, 1.0)
        released: list[tuple[NodeRelease, str]] = []
        start = clock.t
        while clock.t - start < 3 * buy_s:
            released += ctl.maybe_release()
            clock.t += 60
        assert [r.node for r, _ in released if r.node == idle] == []  # held for the gang that can complete
        assert ctl.releaser is not None and isinstance(ctl.releaser.scaler, PayoffAwareNodes)
        held = dict(ctl.releaser.scaler.held)
        assert held.get("needed_by_pending_work", 0) > 0 and "pending_gang_out_of_reach" not in held
        for q in pods_in(kube, ns):
            kube.delete(f"/api/v1/namespaces/{ns}/pods/{q['metadata']['name']}")
        gang("too-big", 32)
        assert wait_for(lambda: len([q for q in ctl.view.observation().pods if q.namespace == ns]) == 32, 30)
        assert all(q.gang == "too-big" for q in ctl.view.observation().pods if q.namespace == ns)
        while clock.t - start < 4 * buy_s:
            released += ctl.maybe_release()
            clock.t += 60
        # the gang waits past a minute: the loop's start buffer asks for nodes free (one more an hour, up to its
        # max_nodes), so the idle on-demand node is held
        assert [r.node for r, _ in released if r.node == idle] == []
        assert ctl.releaser.buffer is not None
        assert 1 <= ctl.releaser.buffer_decisions[product].nodes <= ctl.releaser.buffer.max_nodes
        assert ctl.releaser.scaler.held.get("start_buffer_hold", 0) > 0
        ctl.releaser.buffer = None  # without it the gang out of reach does not hold the node
        while clock.t - start < 5 * buy_s and not any(r.node == idle for r, _ in released):
            released += ctl.maybe_release()
            clock.t += 60
        mine = [(r, out) for r, out in released if r.node == idle]
        assert [out for _, out in mine] == ["released"]
        assert mine[0][0].idle_for_s >= 3 * buy_s
        assert ctl.releaser.scaler.held.get("pending_gang_out_of_reach", 0) > 0
        assert wait_for(lambda: not _exists(kube, idle), 10)
    finally:
        ctl.stop()
        ctl.view.stop()
        kube.delete(f"/apis/karpenter.sh/v1/nodepools/{name}")
