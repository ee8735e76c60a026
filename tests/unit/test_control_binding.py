"""BindingPlanner on hand-made observations: gangs all-or-nothing, in-flight holds, conflicts, other actors."""

from __future__ import annotations

from gpufleet.control.binding import BindingPlanner
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.schedule.table import NodeSpec, PodRequest


def _node(name: str, gpus: int = 8) -> ObservedNode:
    return ObservedNode(NodeSpec(name, 64_000, 512 * 1024, gpus, "H100"), sku="H100")


def _pod(name: str, gpus: int, *, node: str = "", sched: str = "gpufleet", gang: str = "", gmin: int = 0,
         phase: str = "Pending", prio: int = 0) -> ObservedPod:  # fmt: skip
    req = PodRequest(f"ns/{name}", 1000, 1024, gpus, 1000 if gpus else 0)
    return ObservedPod(req, "ns", name, f"uid-{name}", phase, node=node, scheduler_name=sched, gang=gang,
                       gang_min=gmin, priority=prio, created="2026-01-01T00:00:00Z")  # fmt: skip


def _obs(nodes: list[ObservedNode], pods: list[ObservedPod]) -> Observation:
    return Observation(0.0, tuple(nodes), tuple(pods))


def test_gang_waits_for_all_members_then_binds_whole() -> None:
    nodes = [_node(f"n{i}") for i in range(4)]
    pl = BindingPlanner()
    three = [_pod(f"w{i}", 8, gang="g", gmin=4) for i in range(3)]
    plan = pl.plan(_obs(nodes, three))
    assert plan.binds == () and {u.reason for u in plan.unschedulable} == {"gang_incomplete"}
    plan = pl.plan(_obs(nodes, [*three, _pod("w3", 8, gang="g", gmin=4)]))
    assert len(plan.binds) == 4 and len({b.node for b in plan.binds}) == 4
    assert all(b.gang == "g" and b.reason.startswith("gang_") for b in plan.binds)


def test_gang_that_does_not_fit_binds_nothing() -> None:
    pl = BindingPlanner()
    pods = [_pod(f"w{i}", 8, gang="g", gmin=4) for i in range(4)]
    plan = pl.plan(_obs([_node(f"n{i}") for i in range(3)], pods))
    assert plan.binds == () and {u.reason for u in plan.unschedulable} == {"insufficient_capacity"}
    assert pl.unallocated_gpu_milli() == 3 * 8000  # nothing held


def test_in_flight_pods_hold_capacity_until_abort() -> None:
    pl = BindingPlanner()
    nodes = [_node("n0")]
    a, b = _pod("a", 8), _pod("b", 8)
    (bind,) = pl.plan(_obs(nodes, [a])).binds
    plan = pl.plan(_obs(nodes, [a, b]))  # a not yet seen bound: still in flight, holds the node
    assert plan.binds == () and plan.unschedulable[0].reason == "insufficient_gpu"
    pl.abort(bind)  # the world refused a's binding
    plan = pl.plan(_obs(nodes, [a, b]))
    assert len(plan.binds) == 1 and plan.binds[0].pod == "ns/a"  # a first (same priority and time: name)


def test_pods_bound_by_others_take_capacity_and_finished_ones_free_it() -> None:
    pl = BindingPlanner()
    nodes = [_node("n0"), _node("n1")]
    other = _pod("other", 8, node="n0", sched="default-scheduler", phase="Running")
    plan = pl.plan(_obs(nodes, [other, _pod("mine", 8)]))
    assert [b.node for b in plan.binds] == ["n1"]
    done = _pod("other", 8, node="n0", sched="default-scheduler", phase="Succeeded")
    mine_bound = _pod("mine", 8, node="n1", phase="Running")
    plan = pl.plan(_obs(nodes, [done, mine_bound, _pod("next", 8)]))
    assert [b.node for b in plan.binds] == ["n0"]


def test_over_capacity_by_another_actor_is_reported() -> None:
    pl = BindingPlanner()
    pods = [_pod("x", 8, node="n0", sched="s", phase="Running"), _pod("y", 8, node="n0", sched="s", phase="Running")]
    plan = pl.plan(_obs([_node("n0")], pods))
    assert plan.over_capacity == ("ns/y",)


def test_priority_orders_decisions_and_unready_nodes_are_skipped() -> None:
    pl = BindingPlanner()
    nodes = [_node("n0"), ObservedNode(NodeSpec("n1", 64_000, 512 * 1024, 8, "H100"), ready=False)]
    plan = pl.plan(_obs(nodes, [_pod("low", 8, prio=1), _pod("high", 8, prio=10)]))
    assert [(b.pod, b.node) for b in plan.binds] == [("ns/high", "n0")]
    assert plan.unschedulable[0].pod == "ns/low"


def test_gated_pods_wait() -> None:
    import dataclasses

    gated = dataclasses.replace(_pod("g", 1), gated=True)
    plan = BindingPlanner().plan(_obs([_node("n0")], [gated]))
    assert plan.binds == () and plan.unschedulable == ()


def test_in_flight_holds_survive_a_node_table_rebuild() -> None:
    pl = BindingPlanner()
    a, b = _pod("a", 8), _pod("b", 8)
    (bind,) = pl.plan(_obs([_node("n0")], [a])).binds
    # a node joins (table rebuilt) before the world shows a bound: a still holds n0, b goes to n1
    plan = pl.plan(_obs([_node("n0"), _node("n1")], [a, b]))
    assert [(x.pod, x.node) for x in plan.binds] == [("ns/b", "n1")] and bind.node == "n0"
    assert pl.rebuilds == 2


def test_chunked_planning_decides_exactly_as_one_pass() -> None:
    nodes = [_node(f"n{i}") for i in range(6)]
    pods = [_pod(f"p{i:02d}", 1 + (i % 4)) for i in range(30)]
    one = BindingPlanner().plan(_obs(nodes, pods))
    pl = BindingPlanner()
    got: list[tuple[str, str]] = []
    done: set[str] = set()
    while True:
        part = pl.plan(_obs(nodes, pods), max_units=7, exclude=frozenset(done))
        got += [(b.pod, b.node) for b in part.binds]
        done |= {b.pod for b in part.binds} | {u.pod for u in part.unschedulable}
        if part.remaining == 0:
            break
    assert got == [(b.pod, b.node) for b in one.binds] and len(done) == 30


def test_single_pods_take_room_in_the_loops_tier_order_and_only_tolerating_pods_reach_spot() -> None:
    spot_taint = "gpufleet.io/spot=true:NoSchedule"

    def node(name: str, kind: str) -> ObservedNode:
        taints = (spot_taint,) if kind == "spot" else ()
        spec = NodeSpec(name, 64_000, 512 * 1024, 8, "H100", taints=taints)
        return ObservedNode(spec, sku="H100", capacity_type=kind)

    def pod(name: str, gpus: int, tolerates_spot: bool) -> ObservedPod:
        req = PodRequest(f"ns/{name}", 1000, 1024, gpus, 1000)
        tol = (("gpufleet.io/spot", "Equal", "true", "NoSchedule"),) if tolerates_spot else ()
        return ObservedPod(req, "ns", name, f"uid-{name}", "Pending", scheduler_name="gpufleet", tolerations=tol,
                           created="2026-01-01T00:00:00Z")  # fmt: skip

    nodes = [node("a-od", "on-demand"), node("b-spot", "spot"), node("c-res", "reserved")]
    order = ("reserved", "spot", "on-demand")
    pods = [pod("p1", 8, True), pod("p2", 4, True), pod("p3", 4, False)]
    plan = BindingPlanner(tier_order=order).plan(_obs(nodes, pods))
    where = {b.pod: b.node for b in plan.binds}
    # reserved first; the checkpointable pod then takes spot before on demand; the other pod cannot use spot
    assert where == {"ns/p1": "c-res", "ns/p2": "b-spot", "ns/p3": "a-od"}
    plain = BindingPlanner().plan(_obs(nodes, pods))  # no order: the packing policy alone; the taint still holds
    assert len(plain.binds) == 3 and all(b.node != "b-spot" for b in plain.binds if b.pod == "ns/p3")


def test_a_gang_takes_the_first_capacity_type_that_holds_all_of_it_else_any_mix() -> None:
    def node(name: str, kind: str) -> ObservedNode:
        return ObservedNode(NodeSpec(name, 64_000, 512 * 1024, 8, "H100"), sku="H100", capacity_type=kind)

    order = ("reserved", "on-demand")
    # names sort on-demand first: without the order the gang would land on the on-demand nodes
    nodes = [node("a-od-0", "on-demand"), node("a-od-1", "on-demand"), node("b-res-0", "reserved"),
             node("b-res-1", "reserved")]  # fmt: skip
    pair = [_pod(f"w{i}", 8, gang="g", gmin=2) for i in range(2)]
    plan = BindingPlanner(tier_order=order).plan(_obs(nodes, pair))
    assert sorted(b.node for b in plan.binds) == ["b-res-0", "b-res-1"]
    # three whole nodes: no capacity type holds it, so it spans both, still all or nothing
    three = [_pod(f"v{i}", 8, gang="h", gmin=3) for i in range(3)]
    plan = BindingPlanner(tier_order=order).plan(_obs(nodes, three))
    assert len(plan.binds) == 3 and {b.node[:3] for b in plan.binds} == {"a-o", "b-r"}
