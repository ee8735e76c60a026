"""Gangs, quotas, preemption and consolidation on small hand-made cases (the documented behaviour)."""

from __future__ import annotations

import pytest

from gpufleet.domain.workloads import WorkloadKind
from gpufleet.schedule import (
    GangInfeasible,
    GangPlacement,
    GangRequest,
    NodeSpec,
    NodeTable,
    NoPreemption,
    PodRequest,
    PreemptionPlan,
    PreemptRequest,
    QuotaBook,
    RunningJob,
    RunningPod,
    TeamQuota,
    place_gang,
    plan_consolidation,
    plan_preemption,
)


def _cluster() -> NodeTable:
    # two NVLink domains of two 8-GPU nodes in rack 0, and one domain of two nodes in rack 1
    specs = [NodeSpec(f"n{i}", 96_000, 524_288, 8, "H100", rack=i // 4, nvlink_domain=i // 2) for i in range(6)]
    return NodeTable.from_specs(specs)


def test_a_gang_that_fits_one_nvlink_domain_gets_one() -> None:
    t = _cluster()
    w = PodRequest("w", 8_000, 65_536, 8, 1000)
    r = place_gang(t, GangRequest("job", (w, w)))
    assert isinstance(r, GangPlacement) and r.level == "nvlink_domain"
    assert len({int(t.nvlink_domain[n]) for n in r.nodes}) == 1


def test_a_gang_too_big_for_its_required_rack_is_refused_and_leaves_no_trace() -> None:
    t = _cluster()
    w = PodRequest("w", 8_000, 65_536, 8, 1000)
    r = place_gang(t, GangRequest("job", (w,) * 5, require="rack"))  # rack 0 has 4 nodes
    assert isinstance(r, GangInfeasible) and r.reason == "no_domain_fits"
    assert t.allocated_gpu_milli() == 0


def test_lender_gets_its_quota_back_from_the_borrower() -> None:
    book = QuotaBook()
    book.add(TeamQuota("research", "ai", "h100", nominal_gpus=8))
    book.add(TeamQuota("prod", "ai", "h100", nominal_gpus=8, borrowing_limit_gpus=6))
    assert book.admit("prod", "h100", 14).reason == "borrowed"
    assert book.admit("prod", "h100", 1).reason == "over_borrowing_limit"
    back = book.admit("research", "h100", 8)
    assert back.decision == "admit_after_reclaim" and [(r.team, r.gpus) for r in back.reclaims] == [("prod", 6)]
    assert book.usage[("prod", "h100")] == 8 and book.usage[("research", "h100")] == 8


def test_lending_limit_keeps_part_of_the_nominal_private() -> None:
    book = QuotaBook()
    book.add(TeamQuota("a", "c", "h100", nominal_gpus=10, lending_limit_gpus=4))
    book.add(TeamQuota("b", "c", "h100", nominal_gpus=0))
    assert book.admit("b", "h100", 4).decision == "admit"
    assert book.admit("b", "h100", 1).reason == "cohort_exhausted"


def test_fair_share_splits_idle_pool_by_weight() -> None:
    book = QuotaBook()
    book.add(TeamQuota("idle", "c", "h100", nominal_gpus=12))
    book.add(TeamQuota("x", "c", "h100", nominal_gpus=0, weight=2.0))
    book.add(TeamQuota("y", "c", "h100", nominal_gpus=0, weight=1.0))
    assert book.fair_share("c", "h100", {"x": 100, "y": 100}) == {"x": 8, "y": 4}


def test_preemption_prefers_the_checkpointed_victim_and_protects_serving_and_young_jobs() -> None:
    now = 100_000
    jobs = [
        RunningJob("ckpt", WorkloadKind.TRAINING, 0, 0, 8, 0, last_checkpoint_s=now - 60, checkpointable=True),
        RunningJob("nockpt", WorkloadKind.TRAINING, 0, 1, 8, now - 7_200),
        RunningJob("serve", WorkloadKind.SERVING, 0, 2, 8, 0),
        RunningJob("young", WorkloadKind.TRAINING, 0, 3, 8, now - 10, min_runtime_s=600),
    ]
    free = {0: 0, 1: 0, 2: 0, 3: 0}
    r = plan_preemption(PreemptRequest("big", WorkloadKind.TRAINING, 2, 8), jobs, free, now, grace_s=120)
    assert isinstance(r, PreemptionPlan) and r.node == 0
    assert r.evictions[0].action == "checkpoint_then_stop" and r.lost_gpu_h == pytest.approx(8 * 60 / 3600)
    none = plan_preemption(PreemptRequest("t", WorkloadKind.TRAINING, 2, 8), jobs[2:], free, now)
    assert isinstance(none, NoPreemption)
    assert dict(none.excluded) == {"serve": "serving_protected", "young": "min_runtime"}


def test_consolidation_drains_the_emptiest_node_but_never_moves_serving() -> None:
    t = _cluster()
    pods = []
    for i, (node, ls) in enumerate([(0, False), (1, False), (1, False), (2, True)]):
        req = PodRequest(f"p{i}", 8_000, 65_536, 2, 1000)
        slots = tuple(int(g) for g in (t.gpu_left_milli[node] == 1000).nonzero()[0][:2])
        t.allocate(node, req, slots)
        pods.append(RunningPod(f"p{i}", req, node, slots, latency_sensitive=ls, checkpointable=True, restart_s=360))
    plan = plan_consolidation(t, pods, now_s=1_000, max_moves_per_hour=1)
    assert plan.nodes_freed == (0,) and plan.gpus_freed == 8 and [m.to_node for m in plan.moves] == [1]
    assert plan.cost_gpu_h == pytest.approx(2 * 360 / 3600)
    assert (2, "latency_sensitive") in plan.skipped
