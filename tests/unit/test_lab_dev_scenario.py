"""The built-in ``lab_dev`` scenario (session 19): a training-heavy development world that validates, builds and runs."""

from __future__ import annotations

import pytest

from gpufleet.cli.scenario_files import resolve_scenario
from gpufleet.domain.catalog import PRICES_BY_SKU
from gpufleet.domain.errors import ValidationError
from gpufleet.sim.builtin import BUILTIN_SCENARIOS, lab_dev_scenario
from gpufleet.sim.run import LOOPS, simulate
from gpufleet.sim.scenario import dump_scenario, parse_scenario_yaml
from gpufleet.sim.world import World


def test_lab_dev_is_registered_and_resolves_by_name() -> None:
    assert BUILTIN_SCENARIOS["lab_dev"] is lab_dev_scenario
    sc = resolve_scenario("lab_dev")
    assert sc.name == "lab_dev" and sc.days == 180


def test_lab_dev_validates_and_round_trips_through_yaml() -> None:
    sc = lab_dev_scenario()
    assert parse_scenario_yaml(dump_scenario(sc)) == sc
    small = lab_dev_scenario(gpus=64, days=10)
    assert parse_scenario_yaml(dump_scenario(small)) == small


def test_lab_dev_is_the_training_heavy_world_it_says() -> None:
    sc = lab_dev_scenario()
    skus = {p.sku for p in sc.pools}
    assert skus == {"h200_141gb", "l40s"} and all(s in PRICES_BY_SKU for s in skus)
    h200 = next(p for p in sc.pools if p.sku == "h200_141gb")
    assert h200.on_demand_quota_gpus is not None
    # planned runs larger than the on-demand quota, some uncertain; experiment streams on both generations
    assert any(r.gpus > h200.on_demand_quota_gpus for r in sc.planned_runs)
    assert any(r.probability < 1 for r in sc.planned_runs)
    assert {e.sku for e in sc.experiments} == skus
    # spot and a secondary provider on each SKU; 3-month terms with a week's lead; a small day 0
    assert all(p.spot_capacity_gpus > 0 and p.secondary_capacity_gpus > 0 for p in sc.pools)
    assert all(p.reserved_term_months == 3 and p.reserved_lead_time_h == 7 * 24 for p in sc.pools)
    assert sum(r.gpus for p in sc.pools for r in p.reservations) <= 64
    # H200 on demand stocks out more often than L40S (the newer SKU)
    l40s = next(p for p in sc.pools if p.sku == "l40s")
    assert h200.on_demand_mean_in_stock_h < l40s.on_demand_mean_in_stock_h
    # serving is small: at most a fifth of the GPUs its fleets may ever hold against the planned runs' peak
    serving_max = sum(s.max_replicas * s.gpus_per_replica for s in sc.serving)
    assert serving_max * 5 <= max(r.gpus for r in sc.planned_runs) * 3


def test_lab_dev_rejects_bad_arguments() -> None:
    with pytest.raises(ValidationError):
        lab_dev_scenario(days=0)
    with pytest.raises(ValidationError):
        lab_dev_scenario(gpus=4)


def test_a_short_lab_dev_run_completes_under_every_loop_with_its_books_balanced() -> None:
    sc = lab_dev_scenario(gpus=128, days=4, seed=3)
    for make in LOOPS.values():
        w = World(sc, make(sc, 3))
        w.run()
        w.check_invariants()
    _, r = simulate(sc, seed=3)
    assert r["cost_conserved"] is True and r["total_cost_usd"] > 0
    assert r["jobs"]["arrived"] > 0
