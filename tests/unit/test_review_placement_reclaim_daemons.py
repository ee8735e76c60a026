"""Consolidation on an observed cluster (control/reclaim.py::plan_reclaim): DaemonSet and static pods stay with their
node (as ``kubectl drain`` leaves them), but what they request is taken on that node: a drain must send each pod to
a node where it then fits, daemons' CPU and memory included (docs/schedule.md: every destination admits it)."""

from __future__ import annotations

from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.control.reclaim import plan_reclaim
from gpufleet.schedule.table import NodeSpec, PodRequest


def _node(name: str) -> ObservedNode:
    return ObservedNode(NodeSpec(name, 64_000, 512 * 1024, 8, "H100"))


def _pod(name: str, node: str, gpus: int, cpu: int = 1000, owner: str = "", kind: str = "training") -> ObservedPod:
    req = PodRequest(f"ns/{name}", cpu, 1024, gpus, 1000 if gpus else 0)
    return ObservedPod(req, "ns", name, f"u-{name}", "Running", node=node, kind=kind,
                       checkpointable=kind == "training", owner_kind=owner)  # fmt: skip


def test_a_drain_never_sends_a_pod_where_daemons_took_the_room() -> None:
    """Review (fixed), the defect: plan_reclaim skipped node-bound pods without counting what they request, so node
    b looked 63 CPUs free while its daemons held 62.5 of them, and the pod drained from a (1 CPU) could not run
    there: evicted to stay Pending."""
    nodes = (_node("a"), _node("b"))
    srv = _pod("srv", "b", 5, kind="serving")  # b stays (serving never moves): the only drain is a onto b
    pods = (_pod("s", "a", 1), srv, _pod("ds", "b", 0, cpu=62_500, owner="DaemonSet"))
    plan = plan_reclaim(Observation(0.0, nodes, pods), 1000)
    assert plan.drains == ()
    # the same daemon with room to spare leaves the drain as it was
    roomy = (*pods[:2], _pod("ds", "b", 0, cpu=2_000, owner="DaemonSet"))
    plan = plan_reclaim(Observation(0.0, nodes, roomy), 1000)
    assert [(d.node, d.evict) for d in plan.drains] == [("a", ("ns/s",))]


def test_a_node_holding_only_daemons_besides_the_work_can_still_be_drained() -> None:
    """Daemons on the drained node itself stay there and do not keep it from being drained (a node-exporter runs
    on every node)."""
    nodes = (_node("a"), _node("b"))
    pods = (_pod("s", "a", 1), _pod("ds-a", "a", 0, cpu=500, owner="DaemonSet"), _pod("big", "b", 5),
            _pod("ds-b", "b", 0, cpu=500, owner="DaemonSet"))  # fmt: skip
    plan = plan_reclaim(Observation(0.0, nodes, pods), 1000)
    assert [(d.node, d.evict) for d in plan.drains] == [("a", ("ns/s",))]


def test_a_daemon_holding_gpus_leaves_no_room_there() -> None:
    """Review (fixed), the same defect for GPUs: a node-bound pod's GPUs were not held, so node b (5 GPUs serving, 3
    held by a static pod) looked 3 GPUs free and the 1-GPU pod from a was drained onto it."""
    nodes = (_node("a"), _node("b"))
    pods = (_pod("s", "a", 1), _pod("srv", "b", 5, kind="serving"), _pod("static", "b", 3, owner="Node"))
    assert plan_reclaim(Observation(0.0, nodes, pods), 1000).drains == ()


def test_an_overcommitted_node_is_planned_around_not_a_crash() -> None:
    """Review (fixed), the defect: a node the observation shows holding more CPU than it has (pods bound by another
    actor, allocatable shrunk since) made plan_reclaim raise from the node table (ValidationError "does not fit
    CPU/memory") instead of planning."""
    nodes = (_node("a"), _node("b"))
    pods = (_pod("x", "a", 1, cpu=40_000), _pod("y", "a", 1, cpu=40_000), _pod("z", "b", 1))
    plan = plan_reclaim(Observation(0.0, nodes, pods), 1000)
    assert all(d.node != "b" for d in plan.drains)  # z has no room on a (its CPU is overcommitted)
