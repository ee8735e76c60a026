"""The simulator schedules through control/scheduling (the schedule package): policy, gangs, quotas, preemption."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.control.scheduling import CLASS_POLICIES
from gpufleet.domain.errors import ValidationError
from gpufleet.sim.builtin import steady_scenario
from gpufleet.sim.run import gpufleet_loop, simulate
from gpufleet.sim.scenario import QuotaSpec, Scenario, parse_scenario
from gpufleet.sim.world import World


def _with(sc: Scenario, **control: object) -> Scenario:
    return sc.model_copy(update={"control": sc.control.model_copy(update=control)})


def _quotas(sc: Scenario, scale: float, borrow: int | None, lend: int | None) -> Scenario:
    """Tight training quotas in one cohort (every job still admissible: 64 GPUs fit nominal + borrowable)."""
    nominal = {"research": 24, "foundation": 24, "applied": 16}
    qs = [
        QuotaSpec(
            team=t,
            sku="h100_80gb",
            cohort="training",
            nominal_gpus=max(8, int(n * scale)),
            borrowing_limit_gpus=borrow,
            lending_limit_gpus=lend,
        )
        for t, n in nominal.items()
    ]
    return sc.model_copy(update={"quotas": qs})


def _placements(sc: Scenario) -> list[tuple[int, tuple[int, ...]]]:
    """(pod, nodes) of every placement, in order."""
    w = World(sc, gpufleet_loop(sc, sc.seed))
    out: list[tuple[int, tuple[int, ...]]] = []
    place = w.scheduling.try_place

    def spy(pod: int, now: int) -> bool:
        ok = place(pod, now)
        if ok:
            out.append((pod, tuple(w.pods.nodes[pod])))
        return ok

    w.scheduling.try_place = spy  # type: ignore[method-assign]
    w.run()
    return out


@pytest.mark.source_only  # patches the world's internals (tests/conftest.py)
def test_the_scenarios_scheduler_policy_changes_placements_and_the_json_names_it() -> None:
    sc = steady_scenario(gpus=256, days=3, seed=5)
    a = _with(sc, scheduler_policy="gpufleet", preemption=False)
    b = _with(sc, scheduler_policy="bestfit", preemption=False)
    pa, pb = _placements(a), _placements(b)
    assert pa != pb  # the policy really decides where pods go
    assert _placements(a) == pa  # and deterministically
    ra, rb = simulate(a)[1], simulate(b)[1]
    assert ra["scheduler_policy"] == "gpufleet" and ra["scheduler"]["policy"] == "gpufleet"
    assert rb["scheduler_policy"] == "bestfit"
    assert ra["scheduler"]["decisions"].get("policy_gpufleet", 0) > 0
    assert rb["scheduler"]["decisions"].get("policy_bestfit", 0) > 0
    json.dumps(ra)  # JSON-ready


def test_an_unknown_scheduler_policy_is_a_clear_error() -> None:
    data = steady_scenario(days=2).model_dump(mode="json")
    data["control"]["scheduler_policy"] = "clustering"
    with pytest.raises(ValidationError, match=r"control\.scheduler_policy"):
        parse_scenario(data)


def test_a_quota_too_small_for_a_job_is_refused_naming_the_quota() -> None:
    data = steady_scenario(days=2).model_dump(mode="json")
    data["quotas"] = [{"team": "research", "sku": "h100_80gb", "nominal_gpus": 8, "borrowing_limit_gpus": 0}]
    with pytest.raises(ValidationError, match=r"quotas.*could never be admitted"):
        parse_scenario(data)


def test_gangs_run_whole_and_prefer_one_rack() -> None:
    sc = steady_scenario(gpus=256, days=4, seed=2)
    w, r = simulate(sc)
    w.check_invariants()
    d = r["scheduler"]["decisions"]
    assert d.get("gang_rack", 0) > 0  # multi-node jobs placed inside one rack when one had room


def test_lent_quota_is_reclaimed_from_borrowers() -> None:
    sc = _quotas(steady_scenario(gpus=128, days=4, seed=3), 1.0, None, None)
    w = World(sc, gpufleet_loop(sc, sc.seed))
    for day in range(1, sc.days + 1):
        w.run(until_s=day * 86400 - 1)
        w.check_invariants()
    w.run()
    w.check_invariants()
    assert w.scheduling.quota_reasons.get("borrowed", 0) > 0
    assert w.scheduling.reclaims > 0 and w.scheduling.reclaimed_gpus > 0
    assert w.scheduling.quota_reasons.get("reclaim_borrowed", 0) > 0


def test_serving_preempts_lower_priority_training_when_that_is_cheaper_than_waiting() -> None:
    sc = steady_scenario(gpus=256, days=5, seed=4)
    _w, r = simulate(_with(sc, preemption=True))
    assert r["scheduler"]["preemptions"] > 0
    assert r["scheduler"]["serving_preempted_for_training"] == 0
    off = simulate(_with(sc, preemption=False))[1]
    assert off["scheduler"]["preemptions"] == 0


small_runs = st.builds(
    lambda gpus, days, seed, policy, preempt, scale, borrow, lend, mtbf: _quotas(
        _with(
            steady_scenario(gpus=gpus, days=days, seed=seed).model_copy(
                update={"failures": steady_scenario().failures.model_copy(update={"node_mtbf_days": mtbf})}
            ),
            scheduler_policy=policy,
            preemption=preempt,
        ),
        scale,
        borrow,
        lend,
    ),
    gpus=st.sampled_from([64, 128]),
    days=st.integers(2, 3),
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(CLASS_POLICIES),
    preempt=st.booleans(),
    scale=st.sampled_from([1.0, 2.0, 8.0]),
    borrow=st.sampled_from([None, 40, 48]),
    lend=st.sampled_from([None, 8, 16]),
    mtbf=st.sampled_from([5.0, 250.0]),
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=small_runs)
def test_whole_runs_keep_capacity_gangs_quotas_and_serving_rules(sc: Scenario) -> None:
    """Checked every simulated day and at the end (World.check_invariants): no node over capacity, no gang
    partly placed, quota books exact, borrowing within limits, no cohort overdrawn, serving never preempted
    for training; and a team asking within its nominal is never refused while others borrow its quota."""
    w = World(sc, gpufleet_loop(sc, sc.seed))
    for day in range(1, sc.days + 1):
        w.run(until_s=day * 86400 - 1)
        w.check_invariants()
    w.run()
    w.check_invariants()
    assert w.scheduling.lender_refused == 0


def test_the_report_names_the_scheduler_policy_of_each_loop() -> None:
    from rich.console import Console

    from gpufleet.cli.cmd_simulate import run_loops
    from gpufleet.report.html import render_html
    from gpufleet.report.summary import print_report

    sc = _with(steady_scenario(gpus=64, days=2, seed=1), scheduler_policy="packing")
    doc = run_loops(sc, sc.seed, ["gpufleet", "baseline"])
    assert doc["loops"]["gpufleet"]["scheduler_policy"] == "packing"
    assert doc["loops"]["baseline"]["scheduler_policy"] == "bestfit"
    html = render_html(doc)
    assert '<tr><td>scheduler policy</td><td>packing</td><td>bestfit</td><td class="bound">-</td></tr>' in html
    console = Console(record=True, width=200)
    print_report(doc, console)
    assert any(
        line.split() == ["│", "scheduler", "policy", "│", "packing", "│", "bestfit", "│", "-", "│"]
        for line in console.export_text().splitlines()
    )


def test_drains_move_checkpointable_work_off_part_used_nodes_only_when_it_pays() -> None:
    from gpufleet.control.scheduling import NodeView, PodView, plan_drains

    nodes = [NodeView(10, 8, 2, True), NodeView(11, 8, 5, False)]

    def pod(movable: bool, serving: bool, ends_s: int) -> list[PodView]:
        return [PodView(1, 10, 2, movable, serving, 0, ends_s)]

    long_run = plan_drains(nodes, pod(True, False, 10 * 3600), 3600, 8, 600)
    assert [(d.node, d.moves) for d in long_run] == [(10, ((1, 11),))]
    assert long_run[0].saved_gpu_h > long_run[0].cost_gpu_h
    assert plan_drains(nodes, pod(True, False, 3600 + 650), 3600, 8, 600) == []  # ends soon: not worth a restart
    assert plan_drains(nodes, pod(False, True, 10 * 3600), 3600, 8, 600) == []  # serving never moves
    assert plan_drains(nodes, pod(True, False, 10 * 3600), 3600, 0, 600) == []  # no disruption budget
