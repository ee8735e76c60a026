"""The loops compared by issue #16: common practice's decisions, gpufleet's procurement and tier choice, and
the comparison document every loop is run into (same world, same seed, with the hindsight bound)."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from gpufleet.cli.scenario_files import resolve_scenario
from gpufleet.control.common_practice import PeakSizedReplicas, QuarterlyPeakProcurer
from gpufleet.control.forecast_led import project, trend_per_day
from gpufleet.control.placement import SpotFirstForCheckpointed, running_tier_order
from gpufleet.control.procurement import ForecastLedProcurer, TierLimits
from gpufleet.domain.catalog import default_pools
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import Tier
from gpufleet.domain.workloads import ServingScaling
from gpufleet.place.fallback import FallbackChain
from gpufleet.ports import PlacementRequest, PoolState, ProcurementContext
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.compare import run_loops

REPO = Path(__file__).resolve().parents[2]
DAY_H = 24


def _reserved_pool(term_months: int = 3):  # type: ignore[no-untyped-def]
    return default_pools("h100_80gb", reserved_term_months=term_months, reserved_lead_time_s=7 * 86400)[0]


def _ctx(hist: np.ndarray, committed: int = 0, now_h: int | None = None) -> ProcurementContext:
    now = (len(hist) if now_h is None else now_h) * 3600
    return ProcurementContext(now, "h100_80gb", _reserved_pool(), hist, None, committed, 8)


def test_quarterly_peak_reserves_for_the_grown_peak_once_per_term() -> None:
    rng = np.random.default_rng(0)
    days = 28
    level = 100 * 1.01 ** (np.arange(days * DAY_H) / DAY_H)  # +1% a day
    hist = level * (1 + 0.2 * np.sin(np.arange(days * DAY_H) / DAY_H * 2 * np.pi)) + rng.normal(0, 2, days * DAY_H)
    p = QuarterlyPeakProcurer()
    (prop,) = p.propose(_ctx(hist))
    p95 = float(np.percentile(hist, 95))
    assert prop.units % 8 == 0 and prop.units > p95  # the peak, grown, in whole nodes
    assert prop.units < 2.0 * p95 and prop.term_months == 3
    assert p.propose(_ctx(hist, now_h=len(hist) + 7 * DAY_H)) == []  # a week later: no review
    assert p.propose(_ctx(hist, now_h=len(hist) + 91 * DAY_H)) != []  # a quarter later: the next review


def test_quarterly_peak_holds_its_level_through_the_quarter_by_renewing_what_ends_within_it() -> None:
    hist = np.full(28 * DAY_H, 200.0)  # the peak: 200 GPUs
    now = len(hist) * 3600
    end_a, end_b = now + 20 * 86400, now + 50 * 86400
    # 160 committed when the order lands: 64 end on day +20, 64 on day +50, 32 last through the quarter
    ctx = dataclasses.replace(_ctx(hist, committed=160), ending_commitments=((64, end_a), (64, end_b)))
    props = QuarterlyPeakProcurer().propose(ctx)
    assert [(p.units, p.start_s) for p in props] == [(40, now + 7 * 86400), (64, end_a), (64, end_b)]
    assert all(p.term_months == 3 for p in props) and "renewing 64 GPUs" in props[1].reason
    # over-committed now: only what the level needs is renewed, soonest first, in whole nodes
    ctx = dataclasses.replace(_ctx(hist, committed=260), ending_commitments=((64, end_a), (64, end_b)))
    props = QuarterlyPeakProcurer().propose(ctx)
    assert [(p.units, p.start_s) for p in props] == [(64, end_a), (8, end_b)]  # 132 last: 200 needs 68 -> 72
    # nothing ends within the quarter (or the caller does not say): what is committed when the order lands
    (prop,) = QuarterlyPeakProcurer().propose(_ctx(hist, committed=160))
    assert prop.units == 40


def test_the_simulator_tells_the_procurer_what_ends_within_the_term() -> None:
    from gpufleet.sim.run import LOOPS, simulate

    sc = default_scenario()
    seen: list[ProcurementContext] = []
    loop = LOOPS["common_practice"](sc, 11)
    inner = loop.procurer

    class Spy:
        def propose(self, ctx: ProcurementContext) -> list[object]:
            seen.append(ctx)
            return inner.propose(ctx)  # type: ignore[no-any-return]

    loop.procurer = Spy()  # type: ignore[assignment]
    simulate(sc.model_copy(update={"days": 120}), seed=11, loop=loop)
    assert seen
    for c in seen:
        term_end = c.now_s + c.pool.lead_time_s + c.commitment_term_h * 3600
        assert sum(u for u, _ in c.ending_commitments) <= c.committed_gpus_at_lead
        assert all(c.now_s + c.pool.lead_time_s < e < term_end for _, e in c.ending_commitments)
        assert [e for _, e in c.ending_commitments] == sorted(e for _, e in c.ending_commitments)
    # the day-0 commitments end within the first quarter, and the first quarter's within the second
    assert any(c.ending_commitments for c in seen)


def test_peak_sized_replicas_stay_static_between_weekly_reviews_and_only_bump_up() -> None:
    sc = ServingScaling(min_replicas=1, max_replicas=100, target_rps_per_replica=10.0)
    a = PeakSizedReplicas(period_s=900)
    n, why = a.desired(current=0, observed_rps=100.0, scaling=sc, now_s=0, last_scale_down_s=0)
    assert (n, why) == (12, "weekly_peak_review")  # 100 rps x 1.2 headroom / 10 rps per replica
    n, why = a.desired(current=n, observed_rps=20.0, scaling=sc, now_s=900, last_scale_down_s=0)
    assert (n, why) == (12, "static_peak_size")  # traffic fell: no scale-down
    n, why = a.desired(current=n, observed_rps=110.0, scaling=sc, now_s=1800, last_scale_down_s=0)
    assert (n, why) == (14, "bumped_over_peak")
    n, why = a.desired(current=n, observed_rps=20.0, scaling=sc, now_s=7 * 86400, last_scale_down_s=0)
    assert n == 14 and why == "weekly_peak_review"  # the week's peak (110 rps) still sizes it


def test_forecast_led_commits_the_steady_base_above_what_cheaper_tiers_absorb() -> None:
    hist = np.full(28 * DAY_H, 200.0)
    p = ForecastLedProcurer({"h100_80gb": TierLimits(spot_capacity_gpus=16, secondary_capacity_gpus=24)})
    (prop,) = p.propose(_ctx(hist))
    # 200 GPUs all the time: spot takes 16 and the secondary provider 24 (both cheaper than reserved)
    assert prop.units == 160
    assert p.propose(_ctx(hist, committed=160)) == []


def test_forecast_led_leaves_a_two_week_burst_to_pay_per_use() -> None:
    hist = np.full(28 * DAY_H, 100.0)
    hist[-14 * DAY_H :] += 256  # a planned run for the last two weeks
    (prop,) = ForecastLedProcurer().propose(_ctx(hist))
    assert prop.units <= 104  # the base, not the burst


def test_forecast_led_reserves_ahead_of_growth() -> None:
    t = np.arange(28 * DAY_H)
    flat = ForecastLedProcurer().propose(_ctx(np.full(len(t), 100.0)))
    growing = ForecastLedProcurer().propose(_ctx(100.0 * 1.004 ** (t / DAY_H - 27)))  # ends at 100, +0.4%/day
    assert trend_per_day(100.0 * 1.004 ** (t / DAY_H)) == pytest.approx(0.004, rel=5e-2)
    assert trend_per_day(100.0 * 1.05 ** (t / DAY_H)) == 0.006  # clipped
    assert growing[0].units > flat[0].units
    assert project(np.full(14 * DAY_H, 5.0), 100, 28 * DAY_H, 1.5) == pytest.approx(np.full(100, 5.0))


def _states(spot_in_stock: bool = True) -> list[PoolState]:
    return [
        PoolState(p, 0, 64 if p.tier is not Tier.RESERVED else None, spot_in_stock or p.tier is not Tier.SPOT)
        for p in default_pools("h100_80gb")
    ]


def test_checkpointed_training_goes_to_spot_first_and_serving_never() -> None:
    placer = SpotFirstForCheckpointed(FallbackChain())
    train = PlacementRequest("1", "h100_80gb", 8, serving=False, checkpointable=True)
    assert placer.choose(train, _states()).tier is Tier.SPOT
    assert placer.choose(train, _states(spot_in_stock=False)).tier is Tier.ON_DEMAND
    serving = PlacementRequest("2", "h100_80gb", 8, serving=True, checkpointable=False)
    assert placer.choose(serving, _states()).tier is Tier.ON_DEMAND
    plain = PlacementRequest("3", "h100_80gb", 8, serving=False, checkpointable=False)
    assert placer.choose(plain, _states()).tier is Tier.ON_DEMAND
    assert Decimal(1) > 0


def test_run_loops_writes_the_comparison_document_with_a_bound_below_every_loop() -> None:
    sc = default_scenario(gpus=64, days=12, seed=3)
    doc = run_loops(sc, 3)
    assert doc["schema"] == "gpufleet.comparison/1" and doc["primary"] == "gpufleet"
    assert set(doc["loops"]) == {"gpufleet", "common_practice", "baseline"}
    assert {doc["loops"][n]["policy"] for n in doc["loops"]} == {"gpufleet", "common_practice", "baseline"}
    bound = doc["hindsight_bound"]
    assert "not a policy" in bound["label"]
    assert sum(bound["cost_by_tier_usd"].values()) == pytest.approx(bound["total_cost_usd"], abs=0.1)
    for name, r in doc["loops"].items():
        assert r["total_cost_usd"] >= bound["total_cost_usd"], name
        ratios = doc["ratios"][name]
        assert ratios["to_bound"] == pytest.approx(r["total_cost_usd"] / bound["total_cost_usd"], abs=1e-4)
        assert ratios["to_baseline"] == pytest.approx(
            r["total_cost_usd"] / doc["loops"]["baseline"]["total_cost_usd"], abs=1e-4
        )
    with pytest.raises(ValidationError, match="loop"):
        run_loops(sc, 3, ["nope"])


@pytest.mark.parametrize("name", ["training_lab", "serving_product"])
def test_shipped_scenarios_load_and_differ_from_the_default(name: str) -> None:
    sc = resolve_scenario(str(REPO / "scenarios" / f"{name}.yaml"))
    assert sc.name == name and sc.days == 180
    assert any(p.reserved_term_months == 3 for p in sc.pools)


def test_default_scenario_starts_small_and_grows() -> None:
    sc = resolve_scenario("default")
    assert sc.days == 180
    day0 = sum(r.gpus for p in sc.pools for r in p.reservations)
    assert day0 <= 96  # a small fleet on day 0
    assert all(p.reserved_term_months * 30 < sc.days for p in sc.pools)  # commitments can expire in the run
    chat = sc.serving[0]
    assert chat.growth_per_quarter ** (180 / 91) == pytest.approx(2.0, rel=1e-6)
    assert any(p.on_demand_mean_stockout_h > 0 and p.on_demand_quota_gpus for p in sc.pools)


def test_a_bad_scenario_file_names_the_field_and_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(
        (REPO / "scenarios" / "training_lab.yaml").read_text().replace("gpus_per_replica: 2", "gpus_per_replica: 0")
    )
    with pytest.raises(ValidationError) as e:
        resolve_scenario(str(f))
    assert "serving[0].gpus_per_replica" in str(e.value) and "bad.yaml:" in str(e.value)
    with pytest.raises(ValidationError, match="does not exist"):
        resolve_scenario(str(tmp_path / "missing.yaml"))


def test_a_team_with_experiment_streams_on_two_skus_runs_each_job_on_its_streams_sku() -> None:
    from gpufleet.sim.run import LOOPS
    from gpufleet.sim.world import World

    sc = resolve_scenario(str(REPO / "scenarios" / "training_lab.yaml")).model_copy(update={"days": 2})
    w = World(sc, LOOPS["baseline"](sc, 1), seed=1)
    sizes = {sku: set() for sku in w.sku_ids}  # type: dict[str, set[int]]
    for j in range(w.pods.n_jobs):
        sizes[w.sku_ids[w.pods.sku[j]]].add(w.pods.gpus[j])
    assert max(sizes["a100_80gb"]) <= 8  # the A100 stream's sizes only
    assert max(sizes["h100_80gb"]) > 8  # the H100 stream's (and the planned runs')


def test_running_nodes_are_tried_cheapest_first_under_gpufleet_and_by_reliability_otherwise() -> None:
    r, od, sp, se = Tier.RESERVED, Tier.ON_DEMAND, Tier.SPOT, Tier.SECONDARY
    h100 = {r: Decimal("4.36"), od: Decimal("6.88"), sp: Decimal("1.25"), se: Decimal("2.95")}
    assert running_tier_order(True, True, h100) == (r, sp, se, od)
    assert running_tier_order(True, False, h100) == (r, se, od)  # spot only for checkpointed training
    assert running_tier_order(False, True, h100) == (r, od, sp, se)
    assert running_tier_order(False, False, h100) == (r, od, se)
    dear_spot = {**h100, sp: Decimal("9"), se: Decimal("6.88")}  # a tie keeps the order of reliability
    assert running_tier_order(True, True, dear_spot) == (r, od, se, sp)


def test_the_world_places_pods_in_the_loops_tier_order() -> None:
    from gpufleet.domain.pools import TIER_RANK
    from gpufleet.sim.run import LOOPS
    from gpufleet.sim.world import World

    sc = default_scenario(gpus=64, days=3, seed=1)
    r, od, sp, se = (TIER_RANK[t] for t in (Tier.RESERVED, Tier.ON_DEMAND, Tier.SPOT, Tier.SECONDARY))
    expect = {  # H100 (the scenario's training SKU): spot $1.25 < secondary $2.95 < on demand $6.88
        "gpufleet": ((r, se, od), (r, sp, se, od)),
        "baseline": ((r, od, se), (r, od, sp, se)),
        "common_practice": ((r, od, se), (r, od, sp, se)),
    }
    for name, (plain_order, ckpt_order) in expect.items():
        w = World(sc, LOOPS[name](sc, 1), seed=1)
        h100 = w.sku_ids.index("h100_80gb")
        jobs = [j for j in range(w.pods.n_jobs) if w.pods.sku[j] == h100]
        ckpt = [j for j in jobs if w.pods.ckpt[j] > 0]
        plain = [j for j in jobs if w.pods.ckpt[j] <= 0]
        assert ckpt and plain
        for j in ckpt:
            assert w.pods.tiers(j) == ckpt_order, name
            assert w.scheduling.ask(j).tiers == ckpt_order  # the scheduling stage is asked in the same order
        for j in plain:
            assert w.pods.tiers(j) == plain_order, name
