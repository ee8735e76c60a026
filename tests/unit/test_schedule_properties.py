"""Invariants of the scheduler's decisions, checked on random clusters and workloads (Hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.workloads import WorkloadKind
from gpufleet.schedule.consolidation import RunningPod, plan_consolidation
from gpufleet.schedule.gang import GangPlacement, GangRequest, place_gang
from gpufleet.schedule.preemption import PreemptionPlan, PreemptRequest, RunningJob, plan_preemption
from gpufleet.schedule.quota import QuotaBook, TeamQuota
from gpufleet.schedule.scheduler import POLICY_NAMES, Infeasible, Placement, Scheduler, make_policy
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest

MODELS = ("A", "B")

node_st = st.builds(
    NodeSpec,
    name=st.uuids().map(str),
    cpu_milli=st.integers(4_000, 64_000),
    memory_mib=st.integers(8_192, 131_072),
    gpu_count=st.sampled_from([1, 2, 4, 8]),
    gpu_model=st.sampled_from(MODELS),
    rack=st.integers(0, 2),
    nvlink_domain=st.integers(0, 3),
    labels=st.sampled_from([(), ("x",), ("x", "y")]),
    taints=st.sampled_from([(), (), ("t",)]),
)


@st.composite
def pod_st(draw: st.DrawFn) -> PodRequest:
    kind = draw(st.sampled_from(["cpu", "share", "whole"]))
    cpu, mem = draw(st.integers(0, 16_000)), draw(st.integers(0, 32_768))
    models = draw(st.sampled_from([(), ("A",), ("B",), ("A", "B")]))
    sel = draw(st.sampled_from([(), (), ("x",), ("y",)]))
    tol = draw(st.sampled_from([(), ("t",)]))
    if kind == "cpu":
        return PodRequest("p", cpu, mem, node_selector=sel, tolerations=tol)
    if kind == "share":
        return PodRequest("p", cpu, mem, 1, draw(st.integers(1, 999)), models, sel, tol)
    return PodRequest("p", cpu, mem, draw(st.sampled_from([1, 2, 4, 8])), 1000, models, sel, tol)


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=8),
    pods=st.lists(pod_st(), min_size=1, max_size=40),
    policy=st.sampled_from(POLICY_NAMES),
    seed=st.integers(0, 1000),
)
def test_every_pod_is_placed_or_reported_and_nothing_goes_over_capacity(
    nodes: list[NodeSpec], pods: list[PodRequest], policy: str, seed: int
) -> None:
    from gpufleet.schedule.frag import fgd_typical_pods

    table = NodeTable.from_specs(nodes)
    sched = Scheduler(table, make_policy(policy, table, fgd_typical_pods(pods)), np.random.default_rng(seed))
    allocated = 0
    for p in pods:
        before = table.allocated_gpu_milli()
        r = sched.place(p)
        assert isinstance(r, Placement | Infeasible) and r.reason
        if isinstance(r, Placement):
            allocated += p.total_gpu_milli
            assert bool(table.model_ok(p.gpu_models)[r.node]) or p.num_gpu == 0
            spec = nodes[r.node]
            assert set(p.node_selector) <= set(spec.labels) and set(spec.taints) <= set(p.tolerations)
        else:
            assert table.allocated_gpu_milli() == before  # a refusal changes nothing
        table.check_invariants()
    assert table.allocated_gpu_milli() == allocated


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=10),
    n_workers=st.integers(1, 6),
    gpus=st.sampled_from([1, 2, 4, 8]),
    require=st.sampled_from([None, "nvlink_domain", "rack"]),
    pre=st.lists(pod_st(), max_size=10),
)
def test_a_gang_is_placed_whole_or_not_at_all(
    nodes: list[NodeSpec], n_workers: int, gpus: int, require: str | None, pre: list[PodRequest]
) -> None:
    table = NodeTable.from_specs(nodes)
    sched = Scheduler(table, make_policy("bestfit", table), np.random.default_rng(0))
    for p in pre:
        sched.place(p)
    before = (table.gpu_left_milli.copy(), table.cpu_left_milli.copy(), table.mem_left_mib.copy())
    worker = PodRequest("w", 1000, 1024, gpus, 1000)
    r = place_gang(table, GangRequest("g", (worker,) * n_workers, require))  # type: ignore[arg-type]
    table.check_invariants()
    if isinstance(r, GangPlacement):
        used = before[0].sum() - table.gpu_left_milli.sum()
        assert used == n_workers * gpus * 1000 and len(r.nodes) == n_workers
        if require == "rack":
            assert len({int(table.rack[n]) for n in r.nodes}) == 1
        if require == "nvlink_domain":
            assert len({int(table.nvlink_domain[n]) for n in r.nodes}) == 1
    else:
        assert (table.gpu_left_milli == before[0]).all() and (table.cpu_left_milli == before[1]).all()
        assert (table.mem_left_mib == before[2]).all()


quota_st = st.lists(
    st.tuples(st.integers(0, 16), st.one_of(st.none(), st.integers(0, 16)), st.one_of(st.none(), st.integers(0, 16))),
    min_size=2,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(quotas=quota_st, ops=st.lists(st.tuples(st.integers(0, 3), st.integers(-8, 8)), max_size=40))
def test_borrowing_stays_within_limits_and_lent_quota_comes_back(
    quotas: list[tuple[int, int | None, int | None]], ops: list[tuple[int, int]]
) -> None:
    book = QuotaBook()
    for i, (nom, borrow, lend) in enumerate(quotas):
        book.add(TeamQuota(f"t{i}", "c", "h100", nom, borrow, lend))
    teams = [f"t{i}" for i in range(len(quotas))]
    for who, delta in ops:
        team = teams[who % len(teams)]
        if delta < 0:
            book.release(team, "h100", min(-delta, book.usage[(team, "h100")]))
            continue
        if delta == 0:
            continue
        q = book.quotas[(team, "h100")]
        within_nominal = book.usage[(team, "h100")] + delta <= q.nominal_gpus
        a = book.admit(team, "h100", delta)
        if within_nominal:
            assert a.decision != "reject", a  # a lender always gets its own nominal back
        members = book.members("c", "h100")
        assert sum(book.pool_use(m) for m in members) <= book.pool_gpus("c", "h100")
        for m in members:
            assert book.usage[(m.team, "h100")] >= 0
            if m.borrowing_limit_gpus is not None:
                assert book.borrowed(m) <= m.borrowing_limit_gpus


job_st = st.builds(
    RunningJob,
    id=st.uuids().map(str),
    kind=st.sampled_from(list(WorkloadKind)),
    priority=st.integers(0, 3),
    node=st.integers(0, 3),
    gpus=st.integers(1, 8),
    started_s=st.integers(0, 10_000),
    last_checkpoint_s=st.one_of(st.none(), st.integers(0, 10_000)),
    checkpointable=st.booleans(),
    min_runtime_s=st.integers(0, 3_600),
    restart_s=st.integers(0, 600),
)


@settings(max_examples=80, deadline=None)
@given(
    jobs=st.lists(job_st, max_size=12),
    kind=st.sampled_from(list(WorkloadKind)),
    prio=st.integers(0, 3),
    gpus=st.integers(1, 8),
)
def test_serving_is_never_preempted_for_training_and_victims_are_eligible(
    jobs: list[RunningJob], kind: WorkloadKind, prio: int, gpus: int
) -> None:
    now = 20_000
    r = plan_preemption(PreemptRequest("r", kind, prio, gpus), jobs, {0: 0, 1: 0, 2: 0, 3: 0}, now)
    if isinstance(r, PreemptionPlan):
        by_id = {j.id: j for j in jobs}
        victims = [by_id[e.job_id] for e in r.evictions]
        assert sum(v.gpus for v in victims) >= gpus
        for v in victims:
            assert v.node == r.node and v.priority < prio and now - v.started_s >= v.min_runtime_s
            assert not (v.kind is WorkloadKind.SERVING and kind is WorkloadKind.TRAINING)


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=2, max_size=8),
    pods=st.lists(st.tuples(pod_st(), st.booleans(), st.booleans()), max_size=20),
    budget=st.integers(0, 10),
)
def test_consolidation_never_moves_latency_sensitive_pods_and_respects_the_budget(
    nodes: list[NodeSpec], pods: list[tuple[PodRequest, bool, bool]], budget: int
) -> None:
    table = NodeTable.from_specs(nodes)
    sched = Scheduler(table, make_policy("random", table), np.random.default_rng(1))
    running: list[RunningPod] = []
    for i, (p, ls, ck) in enumerate(pods):
        r = sched.place(p)
        if isinstance(r, Placement):
            running.append(RunningPod(f"r{i}", p, r.node, r.gpu_slots, latency_sensitive=ls, checkpointable=ck))
    plan = plan_consolidation(table, running, now_s=10_000, max_moves_per_hour=budget)
    by_id = {p.id: p for p in running}
    assert len(plan.moves) <= budget
    for m in plan.moves:
        assert not by_id[m.pod_id].latency_sensitive and m.to_node not in plan.nodes_freed
    for m in plan.moves:  # applying the plan keeps every node within capacity
        p = by_id[m.pod_id]
        table.release(p.node, p.request, p.gpu_slots)
    for m in plan.moves:
        table.allocate(m.to_node, by_id[m.pod_id].request, m.gpu_slots)
    table.check_invariants()
