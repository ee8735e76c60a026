"""Priority preemption on observed pods (control/preempting.py through BindingPlanner.preempt): the simulator's
planner's rules, the reservation (no double booking), the bind once the victims are gone, cancellation."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.binding import BindingPlanner
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.control.preempting import PreemptConfig
from gpufleet.schedule.table import NodeSpec, PodRequest

NOW = 100_000


def _node(name: str, gpus: int = 8, cpu: int = 64_000) -> ObservedNode:
    return ObservedNode(NodeSpec(name, cpu, 512 * 1024, gpus, "H100"), sku="H100")


def _pod(name: str, gpus: int, *, node: str = "", prio: int = 0, kind: str = "training", ckpt: bool = True,
         gang: str = "", gmin: int = 0, started: float = NOW - 3600, cpu: int = 1000,
         ann: tuple[tuple[str, str], ...] = ()) -> ObservedPod:  # fmt: skip
    req = PodRequest(f"ns/{name}", cpu, 1024, gpus, 1000 if gpus else 0)
    return ObservedPod(
        req, "ns", name, f"uid-{name}", "Running" if node else "Pending", node=node,
        scheduler_name="gpufleet" if not node else "other", priority=prio, kind=kind, checkpointable=ckpt,
        gang=gang, gang_min=gmin, created="2026-01-01T00:00:00Z", started_s=started if node else None, annotations=ann,
    )  # fmt: skip


def _obs(nodes: list[ObservedNode], pods: list[ObservedPod], now: float = NOW) -> Observation:
    return Observation(now, tuple(nodes), tuple(pods))


def _plan_and_preempt(pl: BindingPlanner, obs: Observation):  # type: ignore[no-untyped-def]
    plan = pl.plan(obs)
    return plan, pl.preempt(obs, plan.unschedulable)


def test_high_priority_training_evicts_checkpointable_low_priority_then_binds_when_gone() -> None:
    nodes = [_node("n0")]
    low = [_pod("low-a", 4, node="n0", prio=1), _pod("low-b", 4, node="n0", prio=1)]
    high = _pod("high", 8, prio=100)
    pl = BindingPlanner()
    plan, (decisions, none) = _plan_and_preempt(pl, _obs(nodes, [*low, high]))
    assert plan.binds == () and none == ()
    (d,) = decisions
    assert d.key == "ns/high" and d.nodes == ("n0",) and d.reason == "preempt_for_priority"
    assert d.plan_reason == "preempt_lowest_loss"
    assert sorted(v.pod for v in d.victims) == ["ns/low-a", "ns/low-b"]
    assert {(v.action, v.grace_s) for v in d.victims} == {("checkpoint_then_stop", 120)}
    # victims still there (terminating): no bind yet, and the room is not given to anyone else
    terminating = [_pod("low-a", 4, node="n0", prio=1), _pod("low-b", 4, node="n0", prio=1)]
    other = _pod("other", 8, prio=50)
    plan, (decisions, _) = _plan_and_preempt(pl, _obs(nodes, [*terminating, high, other]))
    assert plan.binds == () and decisions == ()  # "other" may not preempt the victims again
    # victims gone: the preemptor binds where they were
    plan = pl.plan(_obs(nodes, [high, other]))
    assert [(b.pod, b.node, b.reason) for b in plan.binds] == [("ns/high", "n0", "preempted_room")]
    assert [u.pod for u in plan.unschedulable] == ["ns/other"]


def test_serving_is_never_evicted_for_training_nor_equal_priority() -> None:
    nodes = [_node("n0"), _node("n1")]
    pods = [_pod("srv", 8, node="n0", prio=1, kind="serving"), _pod("peer", 8, node="n1", prio=100),
            _pod("high", 8, prio=100)]  # fmt: skip
    pl = BindingPlanner()
    _, (decisions, none) = _plan_and_preempt(pl, _obs(nodes, pods))
    assert decisions == () and [(n.key, n.reason) for n in none] == [("ns/high", "no_eligible_victims")]


def test_waiting_is_cheaper_than_losing_a_long_uncheckpointed_run() -> None:
    nodes = [_node("n0")]
    pods = [_pod("low", 8, node="n0", prio=1, ckpt=False, started=NOW - 7200), _pod("high", 8, prio=100)]
    _, (decisions, none) = _plan_and_preempt(BindingPlanner(), _obs(nodes, pods))
    assert decisions == () and none[0].reason == "waiting_is_cheaper"
    # the same pod with a checkpoint a minute ago loses 1 min x 8 GPUs < 8 GPUs x 600 s of waiting: preempted
    recent = (("gpufleet.io/last-checkpoint-s", str(NOW - 60)),)
    pods[0] = _pod("low", 8, node="n0", prio=1, ckpt=False, started=NOW - 7200, ann=recent)
    _, (decisions, _) = _plan_and_preempt(BindingPlanner(), _obs(nodes, pods))
    assert [v.action for v in decisions[0].victims] == ["stop"]


def test_min_runtime_protects_a_young_pod_and_the_flag_turns_preemption_off() -> None:
    nodes = [_node("n0")]
    young = _pod("low", 8, node="n0", prio=1, started=NOW - 60, ann=(("gpufleet.io/min-runtime-s", "600"),))
    _, (decisions, none) = _plan_and_preempt(BindingPlanner(), _obs(nodes, [young, _pod("high", 8, prio=9)]))
    assert decisions == () and none[0].reason == "no_eligible_victims"
    off = BindingPlanner(preempt_cfg=PreemptConfig(enabled=False))
    _, (decisions, none) = _plan_and_preempt(
        off, _obs(nodes, [_pod("low", 8, node="n0", prio=1), _pod("h", 8, prio=9)])
    )
    assert decisions == () and none == ()


def test_preemption_policy_never_waits() -> None:
    nodes = [_node("n0")]
    quiet = replace(_pod("high", 8, prio=9), preempts=False)
    _, (decisions, none) = _plan_and_preempt(BindingPlanner(), _obs(nodes, [_pod("low", 8, node="n0", prio=1), quiet]))
    assert decisions == () and [n.reason for n in none] == ["preemption_policy_never"]


def test_cpu_short_node_is_skipped_for_one_where_the_preemptor_fits() -> None:
    nodes = [_node("n0", cpu=4000), _node("n1")]
    pods = [_pod("a", 8, node="n0", prio=1, cpu=500, started=NOW - 10), _pod("b", 8, node="n1", prio=1),
            _pod("high", 8, prio=9, cpu=8000)]  # fmt: skip
    _, (decisions, _) = _plan_and_preempt(BindingPlanner(), _obs(nodes, pods))
    assert decisions[0].nodes == ("n1",) and [v.pod for v in decisions[0].victims] == ["ns/b"]


def test_cancel_gives_the_room_back_and_victims_hold_again() -> None:
    nodes = [_node("n0")]
    pods = [_pod("low", 8, node="n0", prio=1), _pod("high", 8, prio=9)]
    pl = BindingPlanner()
    _, (decisions, _) = _plan_and_preempt(pl, _obs(nodes, pods))
    pl.cancel(decisions[0])
    assert pl.reserved() == () and pl.dropped == [("ns/high", "eviction_failed")]
    plan = pl.plan(_obs(nodes, [*pods, _pod("mid", 8, prio=5)]))
    assert plan.binds == ()  # the victim holds its node again; the preemptor is pending again
    assert {u.pod for u in plan.unschedulable} == {"ns/high", "ns/mid"}
    assert pl.unallocated_gpu_milli() == 0


def test_reservation_expires() -> None:
    nodes = [_node("n0")]
    pods = [_pod("low", 8, node="n0", prio=1), _pod("high", 8, prio=9)]
    pl = BindingPlanner(preempt_cfg=PreemptConfig(hold_s=60))
    _plan_and_preempt(pl, _obs(nodes, pods))
    pl.plan(_obs(nodes, pods, now=NOW + 61))
    assert pl.dropped == [("ns/high", "reservation_expired")]


def test_gang_empties_the_cheapest_whole_nodes_and_binds_whole() -> None:
    nodes = [_node(f"n{i}") for i in range(3)]
    pods = [
        _pod("old", 8, node="n0", prio=1, ckpt=False, started=NOW - 7200),  # dear to stop
        _pod("c1", 4, node="n1", prio=1), _pod("c2", 4, node="n1", prio=1),
        _pod("c3", 8, node="n2", prio=1),
        *(_pod(f"w{i}", 8, prio=50, gang="g", gmin=2) for i in range(2)),
    ]  # fmt: skip
    pl = BindingPlanner()
    _, (decisions, none) = _plan_and_preempt(pl, _obs(nodes, pods))
    assert none == ()
    (d,) = decisions
    assert d.key == "ns/g" and d.gang == "g" and d.plan_reason == "gang_lowest_loss"
    assert sorted(d.nodes) == ["n1", "n2"] and sorted(v.pod for v in d.victims) == ["ns/c1", "ns/c2", "ns/c3"]
    rest = [pods[0], *pods[4:]]
    plan = pl.plan(_obs(nodes, rest))
    assert sorted((b.pod, b.node) for b in plan.binds) == sorted(zip(d.pods, d.nodes, strict=True))
    assert all(b.gang == "g" and b.reason == "preempted_room" for b in plan.binds)


def test_gang_never_empties_a_node_holding_serving_or_gang_members() -> None:
    nodes = [_node("n0"), _node("n1")]
    pods = [_pod("srv", 8, node="n0", prio=1, kind="serving"), _pod("t", 4, node="n1", prio=1),
            _pod("other-gang", 4, node="n1", prio=1, gang="h"),
            *(_pod(f"w{i}", 8, prio=50, gang="g", gmin=2) for i in range(2))]  # fmt: skip
    _, (decisions, none) = _plan_and_preempt(BindingPlanner(), _obs(nodes, pods))
    assert decisions == () and none[0].key == "ns/g"


# -- invariants ----------------------------------------------------------------------------------------------------
running = st.tuples(
    st.integers(0, 3),  # node
    st.sampled_from([1, 2, 4, 8]),  # GPUs
    st.integers(0, 6),  # priority
    st.sampled_from(["training", "serving"]),
    st.booleans(),  # checkpointable
    st.integers(0, 20_000),  # seconds running
)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(running, min_size=1, max_size=16),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 7),
    st.sampled_from(["training", "serving"]),
    st.lists(st.integers(0, 6), min_size=4, max_size=4),
)
def test_invariants_of_a_decision(specs, gpus, prio, kind, fill) -> None:  # type: ignore[no-untyped-def]
    nodes = [_node(f"n{i}") for i in range(4)]
    used = [0] * 4
    pods = []
    for i, (n, g, p, k, ck, age) in enumerate(specs):
        if used[n] + g > 8:
            continue  # the world never over-commits a node here
        used[n] += g
        pods.append(_pod(f"r{i}", g, node=f"n{n}", prio=p, kind=k, ckpt=ck, started=NOW - age))
    for n in range(4):  # the rest of each node: one more pod, so that the preemptor rarely fits as it is
        if used[n] < 8:
            pods.append(_pod(f"fill{n}", 8 - used[n], node=f"n{n}", prio=fill[n], kind="training", ckpt=n % 2 == 0))
    pre = _pod("pre", gpus, prio=prio, kind=kind)
    pl = BindingPlanner()
    plan, (decisions, none) = _plan_and_preempt(pl, _obs(nodes, [*pods, pre]))
    if plan.binds:
        assert decisions == () and none == ()  # it fit: nothing to preempt
        return
    by_key = {p.key: p for p in pods}
    for d in decisions:
        (node,) = d.nodes
        victims = [by_key[v.pod] for v in d.victims]
        assert all(v.priority < prio for v in victims)  # strictly lower priority only
        assert kind == "serving" or all(v.kind != "serving" for v in victims)  # serving never for training
        assert all(v.node == node for v in victims)
        left = 8 - sum(p.request.num_gpu for p in pods if p.node == node and p not in victims)
        assert left >= gpus  # the freed node fits the preemptor
        assert d.lost_gpu_h <= gpus * 600 / 3600  # cheaper than waiting for a node
    gone = [p for p in pods if p.key not in {v.pod for d in decisions for v in d.victims}]
    again = pl.plan(_obs(nodes, [*gone, pre]))
    assert [b.node for b in again.binds] == [d.nodes[0] for d in decisions]
    assert pl.table is not None
    pl.table.check_invariants()


@settings(max_examples=80, deadline=None)
@given(
    st.lists(running, min_size=1, max_size=16),
    st.integers(1, 3),  # gang members
    st.sampled_from([4, 8]),  # GPUs per member (8: a whole node each)
    st.integers(1, 7),
    st.lists(st.integers(0, 6), min_size=4, max_size=4),
)
def test_gang_invariants(specs, size, per, prio, fill) -> None:  # type: ignore[no-untyped-def]
    nodes = [_node(f"n{i}") for i in range(4)]
    used = [0] * 4
    pods = []
    for i, (n, g, p, k, ck, age) in enumerate(specs):
        if used[n] + g <= 8:
            used[n] += g
            pods.append(_pod(f"r{i}", g, node=f"n{n}", prio=p, kind=k, ckpt=ck, started=NOW - age))
    for n in range(4):
        if used[n] < 8:
            pods.append(_pod(f"fill{n}", 8 - used[n], node=f"n{n}", prio=fill[n], kind="training"))
    gang = [_pod(f"w{i}", per, prio=prio, gang="g", gmin=size) for i in range(size)]
    pl = BindingPlanner()
    _, (decisions, _) = _plan_and_preempt(pl, _obs(nodes, [*pods, *gang]))
    by_key = {p.key: p for p in pods}
    for d in decisions:
        victims = [by_key[v.pod] for v in d.victims]
        assert all(v.priority < prio and v.kind != "serving" for v in victims)
        assert {v.node for v in victims} <= set(d.nodes)  # victims only where the gang goes
        for node in set(d.nodes):  # the gang fits each of its nodes once the victims are gone
            kept = sum(p.request.num_gpu for p in pods if p.node == node and p not in victims)
            assert kept + per * d.nodes.count(node) <= 8
    gone = {v.pod for d in decisions for v in d.victims}
    again = pl.plan(_obs(nodes, [*(p for p in pods if p.key not in gone), *gang]))
    assert sorted(b.node for b in again.binds) == sorted(n for d in decisions for n in d.nodes)
    assert pl.table is not None
    pl.table.check_invariants()
