"""The gpufleet reservation policy's cold start and level hedging; ServeGen gap edges are gaps, not demand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters.traces import Series
from gpufleet.bench.procure import RpsToGpus
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.procure.policies import GpufleetReservationPolicy
from gpufleet.procure.replay import ReplayConfig, replay


def _cfg(term_h: int = 72, lead_h: int = 12) -> ReplayConfig:
    return ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=term_h, lead_h=lead_h)


def test_unobserved_lags_take_the_recent_level_so_the_cold_start_can_commit() -> None:
    history = np.full(6, 40.0)
    policy = GpufleetReservationPolicy(level_sigma0=0.0)
    scen = policy.scenarios(len(history), history, _cfg())
    assert not np.isnan(scen).any()
    assert scen == pytest.approx(40.0)
    res = replay(_cfg(), np.full(96, 40.0), GpufleetReservationPolicy())
    assert res.commits[:6].sum() > 0  # commits within the first hours, not after a day


def test_level_spread_widens_with_volatile_days_and_with_the_horizon() -> None:
    cfg = _cfg(term_h=168, lead_h=24)
    day = 100 + 10 * np.sin(2 * np.pi * np.arange(24) / 24)
    stable = np.tile(day, 10)
    volatile = np.concatenate([day * f for f in (0.6, 1.4, 0.7, 1.3, 0.6, 1.4, 0.7, 1.3, 0.8, 1.0)])
    policy = GpufleetReservationPolicy(level_drift=0.3)  # the horizon term is opt-in since the m-mid analysis

    def spread(history: np.ndarray) -> np.ndarray:
        scen = policy.scenarios(len(history), history, cfg)
        return np.log(scen.max(axis=0) / scen.min(axis=0))

    s_stable, s_volatile = spread(stable), spread(volatile)
    assert np.all(s_volatile > s_stable)
    assert s_stable[-1] > s_stable[0]  # later hours of the term are less certain
    # and the break-even rule commits less on the volatile history with the same last day
    have = np.zeros(cfg.lead_h + cfg.term_h)
    assert policy.decide(len(volatile), volatile, have, cfg) < policy.decide(len(stable), stable, have, cfg)


def test_a_one_day_outage_does_not_inflate_the_level_spread() -> None:
    cfg = _cfg(term_h=168, lead_h=24)
    day = 100 + 10 * np.sin(2 * np.pi * np.arange(24) / 24)
    clean = np.tile(day, 12)
    outage = clean.copy()
    outage[5 * 24 : 6 * 24] = 0.0
    policy = GpufleetReservationPolicy(level_prior_days=0.0)
    sc, so = policy.scenarios(len(clean), clean, cfg), policy.scenarios(len(outage), outage, cfg)
    # median absolute daily change is robust to one outage day: the same spread (up to the lag rows)
    assert np.log(so[:, -1].max() / so[:, -1].min()) == pytest.approx(np.log(sc[:, -1].max() / sc[:, -1].min()))


def test_no_level_hedge_gives_the_plain_lag_scenarios() -> None:
    history = np.arange(24 * 6, dtype=np.float64) % 24 + 10
    cfg = _cfg()
    plain = GpufleetReservationPolicy(level_sigma0=0.0).scenarios(len(history), history, cfg)
    hedged = GpufleetReservationPolicy().scenarios(len(history), history, cfg)
    assert hedged.shape[0] == 5 * plain.shape[0]
    n = plain.shape[0]
    assert hedged[2 * n : 3 * n] == pytest.approx(plain)  # z = 0 block
    assert hedged[4 * n :] == pytest.approx(plain)  # downside-only by default: no level above the centre
    assert np.all(hedged[: 2 * n] < plain[None].repeat(2, 0).reshape(-1, plain.shape[1]) + 1e-9)
    both = GpufleetReservationPolicy(level_upside=1.0).scenarios(len(history), history, cfg)
    assert np.all(both[4 * n :] > plain)


def test_near_zero_samples_at_the_edge_of_a_zero_window_are_gaps() -> None:
    rps = np.full(400, 1500.0)
    rps[100:105] = 0.0  # exporter outage
    rps[105] = 14.0  # the partly covered window after it
    rps[99] = 3.0  # and before it
    rps[300] = 40.0  # a genuine dip far from any gap is demand
    s = Series("m", np.arange(400, dtype=np.float64) * 600, rps)
    gpus = RpsToGpus(2.0, 8).convert(s).values
    assert np.isnan(gpus[99:106]).all()
    assert gpus[300] == 8 * 20
    assert gpus[98] == gpus[106] == 8 * 750


def _spread(policy: GpufleetReservationPolicy, history: np.ndarray, cfg: ReplayConfig) -> np.ndarray:
    scen = policy.scenarios(len(history), history, cfg)
    out: np.ndarray = np.log(scen.max(axis=0) / scen.min(axis=0))
    return out


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.floats(10.0, 200.0), min_size=24, max_size=24),
    levels=st.lists(st.floats(0.5, 2.0), min_size=2, max_size=12),
    extra_days=st.integers(1, 6),
)
def test_default_hedge_is_flat_over_the_horizon_and_narrows_as_days_accumulate(
    shape: list[float], levels: list[float], extra_days: int
) -> None:
    cfg = _cfg(term_h=168, lead_h=24)
    day = np.array(shape)
    history = np.concatenate([day * f for f in levels])
    policy = GpufleetReservationPolicy()
    s = _spread(policy, history, cfg)
    assert s == pytest.approx(np.full_like(s, s[0]), abs=1e-9)  # no random-walk term by default
    # the same history followed by more days at the last level: the level is known better, never worse
    # (the robust volatility estimate can only fall when zero day-to-day changes are added)
    longer = np.concatenate([history, np.tile(day * levels[-1], extra_days)])
    assert _spread(policy, longer, cfg)[0] <= s[0] + 1e-9


def test_on_a_growing_series_the_horizon_drift_under_commits_and_costs_more() -> None:
    # demand growing 3 % a day with a daily cycle, a 30-day term: the downside-only drift of the old default
    # discounts the far hours of the term, commits less than the level-only hedge and pays more on-demand
    cfg = _cfg(term_h=720, lead_h=24)
    hours = np.arange(24 * 21)
    demand = 100 * np.exp(0.03 * hours / 24) * (1 + 0.2 * np.sin(2 * np.pi * hours / 24))
    now, old = (
        replay(cfg, demand, GpufleetReservationPolicy()),
        replay(cfg, demand, GpufleetReservationPolicy(level_drift=0.3)),
    )
    assert now.commits.sum() > old.commits.sum()
    assert now.cost_usd < old.cost_usd
    assert now.gpu_h_by_tier["on_demand"] < old.gpu_h_by_tier["on_demand"]
