"""plan_preemption builds evictions only for the victims it picks: the same plans as building one per candidate."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.workloads import WorkloadKind
from gpufleet.schedule.preemption import (
    Eviction,
    NoPreemption,
    PreemptionPlan,
    PreemptRequest,
    RunningJob,
    eviction_cost,
    exclusion,
    plan_preemption,
)


def reference_plan(
    req: PreemptRequest, running: Sequence[RunningJob], free: dict[int, int], now_s: int, grace_s: int
) -> PreemptionPlan | NoPreemption:
    """plan_preemption as first written: an Eviction per eligible candidate."""
    if any(f >= req.gpus for f in free.values()):
        return NoPreemption(req.id, "fits_without_preemption")
    excluded: list[tuple[str, str]] = []
    by_node: dict[int, list[tuple[Eviction, RunningJob]]] = {}
    for job in running:
        why = exclusion(job, req, now_s)
        if why is not None:
            excluded.append((job.id, why))
            continue
        by_node.setdefault(job.node, []).append((eviction_cost(job, now_s, grace_s), job))
    if not by_node:
        return NoPreemption(req.id, "no_eligible_victims", tuple(excluded))
    best: PreemptionPlan | None = None
    for node, cands in by_node.items():
        need = req.gpus - free.get(node, 0)
        if sum(j.gpus for _, j in cands) < need:
            continue
        cands.sort(key=lambda c: (c[0].lost_gpu_h / max(1, c[1].gpus), c[1].id))
        chosen: list[tuple[Eviction, RunningJob]] = []
        got = 0
        for c in cands:
            if got >= need:
                break
            chosen.append(c)
            got += c[1].gpus
        for c in sorted(chosen, key=lambda c: -c[0].lost_gpu_h):
            if got - c[1].gpus >= need:
                chosen.remove(c)
                got -= c[1].gpus
        lost = sum(e.lost_gpu_h for e, _ in chosen)
        if best is None or lost < best.lost_gpu_h:
            best = PreemptionPlan(req.id, node, tuple(e for e, _ in chosen), lost)
    if best is None:
        return NoPreemption(req.id, "victims_insufficient", tuple(excluded))
    return best


jobs = st.lists(
    st.tuples(
        st.integers(0, 5),  # node
        st.integers(1, 8),  # GPUs
        st.integers(0, 3),  # priority
        st.integers(0, 7200),  # started this long ago
        st.one_of(st.none(), st.integers(0, 3600)),  # checkpoint interval
        st.booleans(),  # serving
        st.integers(0, 600),  # restart
        st.integers(0, 900),  # min runtime
    ),
    max_size=24,
)


@settings(max_examples=300, deadline=None)
@given(jobs, st.integers(1, 8), st.integers(1, 3), st.booleans(), st.dictionaries(st.integers(0, 5), st.integers(0, 7)))
def test_plan_is_the_reference_plan(
    rows: list[tuple[int, int, int, int, int | None, bool, int, int]],
    gpus: int,
    prio: int,
    serving: bool,
    free: dict[int, int],
) -> None:
    now = 10_000
    running = [
        RunningJob(
            f"j{i % 7}",  # repeated ids: ties in the order are broken the same way
            WorkloadKind.SERVING if srv else WorkloadKind.TRAINING,
            p,
            node,
            g,
            now - age,
            None if ck is None or ck == 0 else now - age + (age // ck) * ck,
            ck is not None,
            minrt,
            rs,
        )
        for i, (node, g, p, age, ck, srv, rs, minrt) in enumerate(rows)
    ]
    req = PreemptRequest("r", WorkloadKind.SERVING if serving else WorkloadKind.TRAINING, prio, gpus)
    assert plan_preemption(req, running, free, now, 120) == reference_plan(req, running, free, now, 120)
