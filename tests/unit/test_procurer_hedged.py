"""gpufleet's one procurer (control/procurement.py): the forecast-led rule hedged by shadows of the simple rules.
Invariants over random histories, the shadow book's memo, and the bench replaying the very object the loop holds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.forecast_led import project
from gpufleet.control.loop import ControlLoop
from gpufleet.control.procurement import ForecastLedProcurer, TierLimits, whole_nodes
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG, default_pools
from gpufleet.ports import ProcurementContext
from gpufleet.procure.freshdays import FreshDaysRule, units_worth_committing_tiered
from gpufleet.procure.hedge import ShadowBook, hour_costs_usd
from gpufleet.procure.policies import AllOnDemand, lookback_p50, units_worth_committing
from gpufleet.procure.replay import ReplayConfig, replay

POOL = default_pools("h100_80gb", reserved_term_months=1, reserved_lead_time_s=24 * 3600)[0]
WEEK = 7 * 24


def _ctx(hist: np.ndarray, committed: int = 0, per: int = 8, term_h: int | None = WEEK) -> ProcurementContext:
    return ProcurementContext(len(hist) * 3600, "h100_80gb", POOL, hist, None, committed, per, term_h=term_h)


def _units(p: ForecastLedProcurer, ctx: ProcurementContext) -> int:
    return sum(x.units for x in p.propose(ctx))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    hours=st.integers(1, 21 * 24),
    level=st.floats(0.0, 500.0),
    spread=st.floats(0.0, 1.0),
    per=st.sampled_from([1, 4, 8]),
    committed=st.integers(0, 400),
)
def test_whole_nodes_never_negative_never_above_the_unhedged_forecast_rule(
    seed: int, hours: int, level: float, spread: float, per: int, committed: int
) -> None:
    rng = np.random.default_rng(seed)
    hist = level * (1 + spread * rng.standard_normal(hours)).clip(0, None)
    ctx = _ctx(hist, committed, per)
    p = ForecastLedProcurer()
    props = p.propose(ctx)
    # the unhedged rule: the forecast rule the shadow book picked (weekly profile or fresh days), alone
    hist_, term_h, lead_h, m = p.context_view(ctx)
    alone = per * p.unhedged_nodes(hist_, committed, per, term_h, lead_h, m, p.forecast_rule(ctx))[0]
    if p.forecast_rule(ctx) == "forecast_led":
        assert alone == _units(ForecastLedProcurer(hedge=None), ctx)
    for prop in props:
        assert prop.units > 0 and prop.units % per == 0
        assert prop.start_s == ctx.now_s + POOL.lead_time_s
        assert prop.reason.startswith("forecast_led: ")
    # the hedge lowers the commitment, or raises it to the cheaper rules' consensus: at most what each of them held
    # through the last week observed (once a term of hours is observed)
    bound = alone
    if len(hist) >= p.books_[next(iter(p.books_))].evidence_h and p.hedge is not None:
        (book,) = p.books_.values()
        cheaper = book.cheaper_rules()
        if cheaper:
            held = min(book.held_at_least(i, len(hist) - p.hedge.consensus_tested_h, len(hist)) for i in cheaper)
            bound = max(alone, per * whole_nodes(held - committed, per))
    assert sum(prop.units for prop in props) <= bound


@settings(max_examples=30, deadline=None)
@given(hours=st.integers(0, 30 * 24), per=st.sampled_from([1, 8]))
def test_an_idle_history_proposes_nothing(hours: int, per: int) -> None:
    assert ForecastLedProcurer().propose(_ctx(np.zeros(hours), per=per)) == []


def test_nothing_before_the_minimum_history_and_nothing_when_covered() -> None:
    p = ForecastLedProcurer()
    assert p.propose(_ctx(np.full(p.min_history_h - 1, 100.0))) == []
    assert _units(p, _ctx(np.full(14 * 24, 100.0))) >= 88
    assert p.propose(_ctx(np.full(14 * 24, 100.0), committed=100)) == []


def test_project_reads_the_recent_weeks_not_the_oldest() -> None:
    """Four weeks at 100 GPUs then one at 200 (no trend: the step is flat in both halves of the window): the week
    ahead is 200 with the last week, 100 with the old tiling from the oldest week; the median of the weeks is 100
    but brought to the last days' level (weight 1) it is 200."""
    hist = np.concatenate([np.full(4 * WEEK, 100.0), np.full(WEEK, 200.0)])
    assert project(hist, WEEK, 4 * WEEK, 1.3, "recent") == pytest.approx(np.full(WEEK, 200.0))
    assert project(hist, WEEK, 4 * WEEK, 1.3, "oldest") == pytest.approx(np.full(WEEK, 100.0))
    assert project(hist, WEEK, 4 * WEEK, 1.3, "median", level_weight=1.0) == pytest.approx(np.full(WEEK, 200.0))


def test_project_is_hour_of_day_aligned_under_a_week() -> None:
    day = np.where(np.arange(24) < 12, 50.0, 150.0)
    hist = np.tile(day, 4)[5:-7]  # starts at 05:00, ends at 16:00: the projection continues at 17:00
    assert project(hist, 48, 28 * 24, 1.3, "median") == pytest.approx(np.tile(day, 3)[17 : 17 + 48])
    assert project(hist[:10], 5, 28 * 24, 1.3) == pytest.approx(np.full(5, hist[:10].mean()))  # under a day: the level


@pytest.mark.parametrize("consensus", [False, True])
def test_the_hedge_caps_at_a_cheaper_leaner_rule(consensus: bool) -> None:
    """A series whose level halves after two weeks: the forecast-led rule's commitments made on the high level go
    idle, the lookback median (and all on-demand) cost less on what was observed, so the hedged procurer proposes
    no more than the leader's capacity (session 10's leader cap); under the consensus (the default since session 19)
    no more than that or the last day's break-even quantile (never the stale high level); without the hedge it
    proposes the forecast-led amount."""
    from gpufleet.control.procurement import Hedge

    t = np.arange(40 * 24)
    hist = np.where(t < 14 * 24, 400.0, 120.0) + 40 * (np.sin(2 * np.pi * t / 24) > 0.9)
    hedged = ForecastLedProcurer(hedge=Hedge(consensus=consensus))
    alpha = 0.0
    for n in range(24, len(hist), 24):
        ctx = _ctx(hist[:n], per=1)
        u_h = _units(hedged, ctx)
        h, term_h, lead_h, m = hedged.context_view(ctx)
        alone = hedged.unhedged_nodes(h, 0, 1, term_h, lead_h, m, hedged.forecast_rule(ctx))[0]
        alpha = m.reserved / m.on_demand
        day = np.floor(np.quantile(h[-24:], 1 - alpha) + 1e-9) if consensus else 0
        assert u_h <= max(alone, day)
        if n > 15 * 24:
            assert u_h <= 160  # never the level before the halving
    (book,) = hedged.books_.values()
    assert book.costs_.shape == (6,) and np.all(book.costs_ > 0) and 0.5 < alpha < 0.7


def test_the_shadow_book_is_a_memo_of_the_history() -> None:
    """Advanced call by call, or built once on the whole history: the same shadow costs and leader."""
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=48, lead_h=6)
    rng = np.random.default_rng(3)
    hist = 50 + 20 * rng.random(300)
    step = ShadowBook(cfg, [lookback_p50(), AllOnDemand()], step_h=5)
    for n in (10, 11, 57, 200, 300):
        assert step.extends(hist[:n])
        step.advance(hist[:n])
    once = ShadowBook(cfg, [lookback_p50(), AllOnDemand()], step_h=5)
    once.advance(hist)
    assert step.costs_ == pytest.approx(once.costs_)
    assert step.leader == once.leader
    assert not step.extends(hist[:100] + 1)
    # the all-on-demand shadow costs exactly the on-demand price of every hour seen
    assert step.costs_[1] == pytest.approx(float(hist.sum()) * cfg.on_demand_usd_per_gpu_h)
    assert hour_costs_usd(cfg, np.array([10.0]), np.array([4.0]))[0] == pytest.approx(
        4 * cfg.reserved_usd_per_gpu_h + 6 * cfg.on_demand_usd_per_gpu_h
    )


def test_tier_limits_reach_the_shadows_and_the_rule() -> None:
    hist = np.full(28 * 24, 200.0)
    p = ForecastLedProcurer({"h100_80gb": TierLimits(spot_capacity_gpus=16, secondary_capacity_gpus=24)})
    units = _units(p, _ctx(hist, term_h=None))
    assert units == 160  # spot takes 16 and the secondary provider 24, both cheaper than reserved
    (book,) = p.books_.values()
    assert book.cfg.spot_capacity_gpus == 16 and book.cfg.secondary_capacity_gpus == 24


def test_the_bench_replays_the_object_the_loop_holds() -> None:
    from gpufleet.bench.procure import GPUFLEET_SETTINGS, gpufleet_policy, gpufleet_procurer

    loop_procurer = ControlLoop.gpufleet(seed=1).procurer
    assert type(gpufleet_procurer()) is type(loop_procurer) is ForecastLedProcurer
    assert dataclasses.replace(gpufleet_procurer(), books_={}) == dataclasses.replace(loop_procurer, books_={})  # type: ignore[type-var]
    policy = gpufleet_policy(GPUFLEET_SETTINGS[0])
    assert policy.name == "gpufleet" and policy.every_h == 1
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=WEEK, lead_h=24)
    res = replay(cfg, np.full(21 * 24, 40.0), policy)
    assert res.reserved_gpus[3 * 24 :].min() >= 30  # steady demand is reserved after the cold start
    assert res.cost_usd < 40 * 21 * 24 * cfg.on_demand_usd_per_gpu_h


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), cuts=st.lists(st.integers(1, 400), min_size=1, max_size=5))
def test_the_shadow_book_with_two_forecast_rules_incremental_equals_rebuilt(seed: int, cuts: list[int]) -> None:
    """The fresh-days rule as a second forecast rule: advanced at any cuts or built once, the same costs, forecast
    rule and leader."""
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=72, lead_h=12)
    rng = np.random.default_rng(seed)
    hist = 60 + 30 * np.sin(np.arange(400) * 2 * np.pi / 24) + 15 * rng.random(400)

    def book() -> ShadowBook:
        rules = [FreshDaysRule(), lookback_p50(), AllOnDemand()]
        return ShadowBook(cfg, rules, step_h=3, forecast_rules=2, forecast_prior=0, forecast_evidence_h=48)  # type: ignore[arg-type]

    step, once = book(), book()
    for n in sorted(cuts):
        step.advance(hist[:n])
    step.advance(hist)
    once.advance(hist)
    assert step.costs_ == pytest.approx(once.costs_)
    assert (step.forecast_rule, step.leader) == (once.forecast_rule, once.leader)


def test_the_book_follows_the_cheaper_forecast_rule_after_its_evidence() -> None:
    """Two 'forecast rules' on steady demand: all on-demand (the prior) and the lookback median. The median one
    costs less once its commitments run, so it becomes the forecast rule after the evidence hours, not before."""
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=48, lead_h=2)
    hist = np.full(200, 50.0)
    book = ShadowBook(cfg, [AllOnDemand(), lookback_p50()], step_h=1, min_history_h=0, forecast_rules=2,
                      forecast_prior=0, forecast_evidence_h=100)  # fmt: skip
    book.advance(hist[:99])
    assert book.forecast_rule == "all_on_demand" == book.leader
    book.advance(hist)
    assert book.forecast_rule == "lookback_p50" == book.leader
    assert book.costs_[1] < book.costs_[0]


@pytest.mark.parametrize(("forecast_margin", "moves"), [(0.3, True), (0.5, False), (None, True)])
def test_the_forecast_rules_have_their_own_hysteresis(forecast_margin: float | None, moves: bool) -> None:
    """The lookback median costs ~36 % less than all on-demand on steady demand: the book leaves the prior forecast
    rule for it under a forecast margin of 0.3 (or the leader's 0.01 when None), not under 0.5."""
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=48, lead_h=2)
    book = ShadowBook(cfg, [AllOnDemand(), lookback_p50()], step_h=1, min_history_h=0, forecast_rules=2,
                      forecast_prior=0, forecast_evidence_h=100, forecast_margin=forecast_margin)  # fmt: skip
    book.advance(np.full(200, 50.0))
    assert 0.3 < 1 - book.costs_[1] / book.costs_[0] < 0.5
    assert book.forecast_rule == ("lookback_p50" if moves else "all_on_demand")


def test_the_fresh_days_rule_reads_the_freshest_days_at_the_same_hour() -> None:
    """A daily pattern with no trend: every scenario hour is the pattern's same hour; on steady demand the rule
    buys the level (whole GPUs), nothing above what is committed, nothing on an idle history."""
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=WEEK, lead_h=24)
    day = np.where(np.arange(24) < 12, 40.0, 100.0)
    hist = np.tile(day, 10)
    rule = FreshDaysRule(level_sigma0=0.0)
    scen = rule.scenarios(len(hist), hist, cfg)
    assert scen.shape == (5, WEEK)
    assert scen == pytest.approx(np.tile(np.tile(day, 8)[:WEEK], (5, 1)))
    flat = np.full(10 * 24, 80.0)
    assert rule.gap(len(flat), flat, 0.0, cfg) == 80
    assert rule.gap(len(flat), flat, 80.0, cfg) == 0
    assert FreshDaysRule().gap(48, np.zeros(48), 0.0, cfg) == 0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 200), threshold=st.floats(0.5, 6.88))
def test_tiered_units_equal_the_single_tier_rule_with_on_demand_only(seed: int, n: int, threshold: float) -> None:
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=WEEK, lead_h=24)
    rng = np.random.default_rng(seed)
    demand = 30 * rng.random(n)
    excess = demand - 10
    got = units_worth_committing_tiered(excess, demand, cfg, threshold_usd=threshold)
    assert got == units_worth_committing(excess, threshold / cfg.on_demand_usd_per_gpu_h)


def test_the_procurer_follows_the_fresh_days_rule_first_and_says_so() -> None:
    p = ForecastLedProcurer()
    props = p.propose(_ctx(np.full(30, 64.0), per=8))
    assert p.forecast_rule(_ctx(np.full(30, 64.0), per=8)) == "fresh_days"
    assert props and "freshest days" in props[0].reason and props[0].units % 8 == 0


@pytest.mark.parametrize("n", [5, 7, 30])
def test_shadows_decide_every_hour_up_to_a_month(n: int) -> None:
    """The replay asks every hour, and the cold start's cap is the lookback median's shadow capacity: on a 1-month
    term that shadow holds the median of every hour observed so far (a rising cold start), not the median of the last
    hour a coarser step decided at. Beyond a month (the simulator's 3-month terms) the step stays term / 168."""
    pool = default_pools("h100_80gb", reserved_term_months=1, reserved_lead_time_s=168 * 3600)[0]
    hist = np.arange(n, dtype=np.float64) * 10.0 + 10.0
    p = ForecastLedProcurer()
    for term_h, step in ((720, 1), (2190, 13)):
        ctx = ProcurementContext(n * 3600, "h100_80gb", pool, hist, None, 0, 1, term_h=term_h)
        p.propose(ctx)
        book = next(b for k, b in p.books_.items() if k[2] == term_h)
        assert book.step_h == step
        if step == 1:
            assert book.capacity_at("lookback_p50", n + 168) == np.floor(np.median(hist))


def test_the_cheaper_rules_and_what_they_held() -> None:
    """ShadowBook.cheaper_rules: the simple rules cheaper than the followed forecast rule by more than the margin
    (not the other forecast rule); held_at_least: the least shadow capacity over a span of hours."""
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=48, lead_h=2)
    book = ShadowBook(cfg, [AllOnDemand(), lookback_p50(), AllOnDemand(), lookback_p50()], forecast_rules=2)
    book.costs_ = np.array([100.0, 50.0, 99.5, 98.0])  # the followed forecast rule: rule 0; margin 1 %
    assert book.cheaper_rules() == [3]
    book.caps_[3, 10:20] = np.arange(10, 20)
    assert book.held_at_least(3, 12, 20) == 12.0 and book.held_at_least(3, 20, 20) == 0.0
    assert book.held_at_least(3, -5, 11) == 0.0


def _flat_then_step_and_back() -> np.ndarray:
    """Two weeks at 100 GPUs, a two-day burst to 400, then 100 again, with a small daily wave."""
    t = np.arange(30 * 24)
    return np.where((t >= 14 * 24) & (t < 16 * 24), 400.0, 100.0) + 10 * np.sin(2 * np.pi * t / 24)


@pytest.mark.parametrize("consensus", [True, False])
def test_the_consensus_raises_only_to_what_the_cheaper_rules_held(consensus: bool) -> None:
    """With the consensus (the default since session 19) a commitment may exceed the forecast rule's amount, but
    only once a term of hours is observed and only up to the least capacity the cheaper rules held through the last
    week; with session 10's leader cap (``consensus=False``) never. A burst the lookback peak jumps to is not
    followed: reserve-peak held far less through the week before it."""
    from gpufleet.control.procurement import Hedge

    p = ForecastLedProcurer(hedge=Hedge(consensus=consensus))
    hist = _flat_then_step_and_back()
    committed = 0
    for n in range(24, len(hist), 6):
        ctx = _ctx(hist[:n], committed=committed, per=8)
        props = p.propose(ctx)
        u = sum(x.units for x in props)
        h, term_h, lead_h, m = p.context_view(ctx)
        alone = 8 * p.unhedged_nodes(h, committed, 8, term_h, lead_h, m, p.forecast_rule(ctx))[0]
        assert u >= 0 and u % 8 == 0
        if u > alone:
            (book,) = p.books_.values()
            assert consensus and n >= book.evidence_h
            held = min(book.held_at_least(i, n - WEEK, n) for i in book.cheaper_rules())
            assert committed + u <= held + 4
            assert "raised to" in props[0].reason
        committed = max(committed, committed + u)
    assert committed <= 8 * 20  # never followed the burst (400 GPUs) into a week's term


def test_the_consensus_raise_on_bursty_demand_stays_within_what_the_cheaper_rules_held() -> None:
    """Bursty demand (lognormal hours) replayed hour by hour with 1-week terms: the forecast rules under-commit
    against the lookback median, which costs less, so the procurer is raised above its forecast rule's amount; each
    raise is after a term of observed hours and within the least capacity the cheaper rules held through the last
    week and the last day's break-even quantile."""
    rng = np.random.default_rng(2)
    hist = np.round(60 * rng.lognormal(0, 0.8, 28 * 24))
    p = ForecastLedProcurer()
    assert p.hedge is not None
    committed = np.zeros(len(hist) + 200)
    raised = 0
    for n in range(1, len(hist)):
        have = int(committed[n + 24])
        ctx = _ctx(hist[:n], committed=have, per=1)
        props = p.propose(ctx)
        u = sum(x.units for x in props)
        h, term_h, lead_h, m = p.context_view(ctx)
        if u > p.unhedged_nodes(h, have, 1, term_h, lead_h, m, p.forecast_rule(ctx))[0]:
            raised += 1
            (book,) = p.books_.values()
            assert n >= book.evidence_h == WEEK and "raised to" in props[0].reason
            held = min(book.held_at_least(i, n - WEEK, n) for i in book.cheaper_rules())
            day = np.quantile(h[-24:], 1 - m.reserved / m.on_demand)
            assert have + u <= min(held, day) + 1e-9
        committed[n + 24 : n + 24 + WEEK] += u
    assert raised > 0
