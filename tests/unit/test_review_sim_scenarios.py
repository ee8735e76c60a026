"""Review: the seeded simulator on legal but unusual scenarios (sim/scenario.py, sim/world.py, sim/nodes.py).

Each scenario here validates as written before its fix; the invariant named in each test's docstring then broke in
the run (a utilization above 1, a cost series that fell, a pool out of stock for good) or the run died with a
traceback the user cannot act on. A fixed scenario is either refused naming its field, or runs with every
invariant holding.
"""

from __future__ import annotations

import json
import math
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.control.loop import ControlLoop
from gpufleet.domain.errors import ValidationError
from gpufleet.sim.compare import run_loops
from gpufleet.sim.run import simulate
from gpufleet.sim.scenario import parse_scenario
from gpufleet.sim.world import World

H100 = "h100_80gb"  # 8 GPUs per node
EXPERIMENTS = [{"sku": H100, "jobs_per_day": 40, "teams": {"a": 1}, "size_gpus": {1: 1}}]
SERVING = {
    "name": "chat",
    "team": "a",
    "tenant": "t",
    "sku": H100,
    "gpus_per_replica": 1,
    "target_rps_per_replica": 1.0,
    "base_rps": 3.0,
}


def _scenario(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": "edge", "seed": 1, "days": 2, "pools": [{"sku": H100}], "experiments": EXPERIMENTS}
    d.update(over)
    return d


def _finite_and_non_negative(x: Any, path: str = "") -> list[str]:
    """Paths of the numbers in a summary that are NaN, infinite or negative (the deltas and savings may be < 0)."""
    if isinstance(x, bool):
        return []
    if isinstance(x, int | float):
        bad = not math.isfinite(x) or (x < 0 and "delta" not in path and "saving" not in path)
        return [f"{path}={x}"] if bad else []
    if isinstance(x, dict):
        return [p for k, v in x.items() for p in _finite_and_non_negative(v, f"{path}.{k}")]
    if isinstance(x, list):
        return [p for i, v in enumerate(x) for p in _finite_and_non_negative(v, f"{path}[{i}]")]
    return []


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.integers(1, 40))
def test_an_initial_reservation_is_whole_nodes_or_refused(gpus: int) -> None:
    """Review (fixed), the defect: ``InitialReservation.gpus`` took any positive number, but the desk activates
    ``ceil(gpus / 8)`` whole H100 nodes and bills only ``gpus``: a 4-GPU reservation schedules 8 GPUs on 4 paid, so
    ``gpu_utilization`` came out at 1.88 and the idle reserved cost at -$736 (and ``check_invariants`` failed,
    alloc > paid). A reservation is whole instances: a part of a node is now refused, naming the field."""
    d = _scenario(
        pools=[{"sku": H100, "on_demand_quota_gpus": 0, "reservations": [{"gpus": gpus, "remaining_months": 1}]}],
        experiments=[{**EXPERIMENTS[0], "jobs_per_day": 200}],
    )
    try:
        sc = parse_scenario(d)
    except ValidationError as exc:
        assert gpus % 8 and "pools[0]" in str(exc) and "reservations[0].gpus" in str(exc), str(exc)
        return
    w = World(sc, ControlLoop.baseline(sc.seed))
    w.run()
    w.check_invariants()
    _, r = simulate(sc)
    assert 0 <= r["gpu_utilization"] <= 1 and r["idle_cost_usd"] >= 0, (r["gpu_utilization"], r["idle_cost_usd"])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(period=st.sampled_from([300, 900, 1000, 1800, 2400, 3600, 5400, 7000, 7200]))
def test_the_hourly_series_cover_every_hour_whatever_the_control_period(period: int) -> None:
    """Review (fixed), the defect: the world samples its hourly series (allocated, pending and paid GPUs, the cost so
    far: what the forecaster and the procurer read) on a control tick that falls on the hour (``now % 3600 == 0``),
    so a ``control_period_s`` that does not divide an hour (7000 s) left almost every hour at 0: the cost series
    went 0, ..., 3087.84, 0, ... and procurement saw no demand. Such a period is now refused, naming the field."""
    d = _scenario(control={"control_period_s": period}, serving=[SERVING])
    try:
        sc = parse_scenario(d)
    except ValidationError as exc:
        assert 3600 % period and "control.control_period_s" in str(exc), str(exc)
        return
    _, r = simulate(sc)
    cost = r["series"]["cost_usd"]
    assert all(b >= a for a, b in pairwise(cost)), cost
    assert cost[-1] == pytest.approx(r["total_cost_usd"], abs=0.05)
    paid = [sum(v[0][h] for v in r["series"]["paid_gpus_by_tier"].values()) for h in range(1, len(cost))]
    assert all(p > 0 for p in paid), paid  # the serving fleet holds a node every hour


def test_a_zero_serving_slo_is_refused_naming_the_field() -> None:
    """Review (fixed), the defect: ``ServingSpec.slo_s`` accepted 0, and the scenario then ran common practice and
    the baseline but gpufleet's loop died building its replica policy (``burst_floor: slo_s, memory_s and span_s must
    be > 0``): an error that names neither the file nor the scenario's field. Now refused as ``serving[0].slo_s``."""
    with pytest.raises(ValidationError) as exc:
        parse_scenario(_scenario(serving=[{**SERVING, "slo_s": 0}]))
    assert "serving[0].slo_s" in str(exc.value)


def test_an_on_demand_pool_with_no_stockout_time_stays_in_stock() -> None:
    """Review (fixed), the defect: ``on_demand_mean_stockout_h: 0`` (a stock-out lasts no time) put the on-demand pool
    out of stock after its first in-stock spell and never back (``schedule_stock_toggle`` returns without a next
    toggle when the mean is 0): over 10 days 1 job of 186 completed. A pool whose stock-outs last no time is now
    never out of stock."""
    d = _scenario(days=10, pools=[{"sku": H100, "on_demand_mean_in_stock_h": 1, "on_demand_mean_stockout_h": 0}])
    sc = parse_scenario(d)
    w = World(sc, ControlLoop.baseline(sc.seed))
    w.run()
    w.check_invariants()
    assert w.metrics.stockouts == 0
    assert all(pr.in_stock for pr in w.fleet.pools)
    p = w.pods
    never_started = [j for j in range(p.n_jobs) if p.first_start[j] < 0 and p.arrival[j] < w.horizon_s - 3600]
    assert not never_started, f"{len(never_started)} of {p.n_jobs} jobs never started"


HUGE: list[tuple[str, dict[str, Any]]] = [
    ("planned_runs[0].start_day", {"planned_runs": [{"name": "r", "team": "a", "sku": H100, "gpus": 8,
                                                     "start_day": 1e20, "duration_days": 1}]}),
    ("planned_runs[0].duration_days", {"planned_runs": [{"name": "r", "team": "a", "sku": H100, "gpus": 8,
                                                         "start_day": 0, "duration_days": 1e20}]}),
    ("planned_runs[0].checkpoint_interval_s", {"planned_runs": [{"name": "r", "team": "a", "sku": H100, "gpus": 8,
                                                                 "start_day": 0, "duration_days": 1,
                                                                 "checkpoint_interval_s": 10**20}]}),
    ("experiments[0].checkpoint_interval_s", {"experiments": [{**EXPERIMENTS[0], "checkpoint_interval_s": 10**20}]}),
    ("experiments[0].jobs_per_day", {"experiments": [{**EXPERIMENTS[0], "jobs_per_day": 1e20}]}),
    ("failures.node_mtbf_days", {"failures": {"node_mtbf_days": 1e305}}),
    ("failures.repair_h", {"failures": {"node_mtbf_days": 0.01, "repair_h": 1e305}}),
    ("pools[0].reserved_lead_time_h", {"pools": [{"sku": H100, "reserved_lead_time_h": 1e305}]}),
    ("pools[0].reserved_term_months", {"pools": [{"sku": H100, "reserved_term_months": 10**20}]}),
    ("pools[0].secondary_lead_time_h", {"pools": [{"sku": H100, "on_demand_quota_gpus": 0,
                                                   "secondary_capacity_gpus": 8, "secondary_lead_time_h": 1e305}]}),
    ("pools[0].on_demand_mean_stockout_h", {"pools": [{"sku": H100, "on_demand_mean_in_stock_h": 0.5,
                                                       "on_demand_mean_stockout_h": 1e305}]}),
    ("serving[0].base_rps", {"serving": [{**SERVING, "base_rps": 1e300, "target_rps_per_replica": 1e-300}]}),
    ("serving[0]", {"serving": [{**SERVING, "base_rps": 1e9, "target_rps_per_replica": 1e-6, "max_replicas": 10}]}),
]  # fmt: skip


@pytest.mark.parametrize(("field", "over"), HUGE, ids=[f for f, _ in HUGE])
def test_a_huge_value_is_refused_or_runs_never_a_traceback(field: str, over: dict[str, Any]) -> None:
    """Review (fixed), the defect: the scenario's numbers had no upper bound, and a huge one (a run starting on day
    1e20, an MTBF of 1e305 days, a reservation term of 1e20 months, 1e20 jobs a day) validated and then killed the
    run with an ``OverflowError`` (``int(inf)``, an int64 array) or numpy's "negative dimensions are not allowed": a
    traceback; a serving fleet needing 1e15 replicas at its base rate hung gpufleet's loop (its replica policy's
    work grows with the replicas needed). Each is now refused naming its field (bounds far above any real fleet,
    docs/scenario.md)."""
    try:
        sc = parse_scenario(_scenario(**over))
    except ValidationError as exc:
        assert field in str(exc), str(exc)
        return
    doc = run_loops(sc, sc.seed)
    json.dumps(doc, allow_nan=False)
    assert not _finite_and_non_negative(doc)
