"""Consolidation plans are consistent: applying the moves in order frees exactly the nodes reported."""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpufleet.schedule.consolidation import ConsolidationPlan, RunningPod, plan_consolidation
from gpufleet.schedule.policies import best_fit_gpus
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest
from tests.unit.test_schedule_properties import node_st, pod_st


def _apply_in_order(table: NodeTable, running: list[RunningPod], plan: ConsolidationPlan) -> dict[str, int]:
    """Apply ``plan.moves`` one by one to ``table`` (a copy); return where every pod ends up.

    Asserts per move: the pod is where the move says, it may move, and the destination admits it
    (model, selector, taints, GPU, CPU, memory): ``allocate`` raises if it would go over capacity.
    """
    by_id = {p.id: p for p in running}
    where = {p.id: p.node for p in running}
    slots = {p.id: p.gpu_slots for p in running}
    for m in plan.moves:
        p = by_id[m.pod_id]
        assert not p.latency_sensitive and (p.checkpointable or p.restartable)
        assert where[p.id] == m.from_node != m.to_node
        table.release(m.from_node, p.request, slots[p.id])
        assert table.feasible(p.request)[m.to_node]
        table.allocate(m.to_node, p.request, m.gpu_slots)
        where[p.id], slots[p.id] = m.to_node, m.gpu_slots
        table.check_invariants()
    return where


def test_a_node_that_received_a_pod_is_not_reported_freed() -> None:
    """Regression: 8, 2 and 8 GPU nodes holding 1, 1 and 3 GPU pods; node 1 receives p00 and must stay."""
    specs = [NodeSpec(f"n{i}", 64_000, 262_144, g, "A") for i, g in enumerate((8, 2, 8))]
    table = NodeTable.from_specs(specs)
    running = []
    for node, (pid, gpus) in enumerate((("p00", 1), ("p10", 1), ("p20", 3))):
        req = PodRequest(pid, 1_000, 1_024, gpus, 1000)
        slots = tuple(range(gpus))
        table.allocate(node, req, slots)
        running.append(RunningPod(pid, req, node, slots, checkpointable=True))
    plan = plan_consolidation(table, running, now_s=1_000, max_moves_per_hour=10)
    assert [(m.pod_id, m.from_node, m.to_node) for m in plan.moves] == [("p00", 0, 1)]
    assert plan.nodes_freed == (0,) and plan.gpus_freed == 8
    assert (1, "received_pods") in plan.skipped
    where = _apply_in_order(copy.deepcopy(table), running, plan)
    assert where == {"p00": 1, "p10": 1, "p20": 2}


def test_a_node_with_usage_the_planner_does_not_know_about_is_not_drained() -> None:
    table = NodeTable.from_specs([NodeSpec(f"n{i}", 64_000, 262_144, 8, "A") for i in range(2)])
    known = PodRequest("k", 1_000, 1_024, 1, 1000)
    table.allocate(0, known, (0,))
    table.allocate(0, PodRequest("ghost", 1_000, 1_024, 1, 1000), (1,))
    table.allocate(1, PodRequest("big", 1_000, 1_024, 4, 1000), (0, 1, 2, 3))
    plan = plan_consolidation(table, [RunningPod("k", known, 0, (0,))], now_s=0, max_moves_per_hour=10)
    assert plan.moves == () and plan.nodes_freed == () and (0, "untracked_usage") in plan.skipped


# Plain nodes and small pods make drains (and chains of drains) common; node_st/pod_st add constraints.
plain_node_st = st.builds(
    NodeSpec,
    name=st.uuids().map(str),
    cpu_milli=st.just(64_000),
    memory_mib=st.just(262_144),
    gpu_count=st.sampled_from([1, 2, 4, 8]),
    gpu_model=st.just("A"),
)
small_pod_st = st.builds(
    PodRequest,
    name=st.just("p"),
    cpu_milli=st.integers(0, 4_000),
    memory_mib=st.integers(0, 8_192),
    num_gpu=st.sampled_from([1, 1, 2, 3]),
    gpu_milli=st.just(1000),
)
rare = st.sampled_from([False, False, False, True])


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.one_of(st.lists(plain_node_st, min_size=2, max_size=6), st.lists(node_st, min_size=2, max_size=8)),
    pods=st.lists(
        st.tuples(st.one_of(small_pod_st, pod_st()), st.integers(0, 7), rare, st.booleans(), st.booleans()),
        min_size=2,
        max_size=24,
    ),
    budget=st.integers(0, 12),
    spent=st.sampled_from([0, 0, 0, 3]),
)
@example(  # the reported reproduction, always checked
    nodes=[NodeSpec(f"n{i}", 64_000, 262_144, g, "A") for i, g in enumerate((8, 2, 8))],
    pods=[(PodRequest(f"p{n}", 1_000, 1_024, g, 1000), n, False, True, True) for n, g in enumerate((1, 1, 3))],
    budget=10,
    spent=0,
)
def test_applying_a_plan_in_order_frees_exactly_the_reported_nodes_within_capacity_and_budget(
    nodes: list[NodeSpec],
    pods: list[tuple[PodRequest, int, bool, bool, bool]],
    budget: int,
    spent: int,
) -> None:
    table = NodeTable.from_specs(nodes)
    running: list[RunningPod] = []
    for i, (p, want, ls, ck, rs) in enumerate(pods):  # each pod goes to the node drawn for it, if it fits
        node = want % table.n_nodes
        if table.feasible(p)[node]:
            slots = best_fit_gpus(table, node, p)
            table.allocate(node, p, slots)
            running.append(RunningPod(f"r{i}", p, node, slots, latency_sensitive=ls, checkpointable=ck, restartable=rs))
    before = copy.deepcopy(table)
    plan = plan_consolidation(table, running, now_s=10_000, max_moves_per_hour=budget, moves_in_last_hour=spent)
    assert len(plan.moves) <= max(0, budget - spent)
    after = copy.deepcopy(table)
    where = _apply_in_order(after, running, plan)
    assert np.array_equal(table.gpu_left_milli, before.gpu_left_milli)  # the caller's table is untouched
    freed = set(plan.nodes_freed)
    assert {m.from_node for m in plan.moves} == freed
    assert not freed & {m.to_node for m in plan.moves}
    for n in freed:
        assert n not in where.values()
        assert after.cpu_left_milli[n] == after.cpu_cap_milli[n] and after.mem_left_mib[n] == after.mem_cap_mib[n]
        assert int(after.gpu_left_milli[n].sum()) == int(after.gpu_count[n]) * 1000
    assert plan.gpus_freed == sum(int(table.gpu_count[n]) for n in freed)
    assert abs(plan.cost_gpu_h - sum(m.cost_gpu_h for m in plan.moves)) < 1e-9
