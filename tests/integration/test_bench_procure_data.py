"""The procurement benchmark's done-when on the shared traces (skips when ../shared/data is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.bench.procure import RpsToGpus, load_demand, run_series
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.procure.replay import ReplayConfig

BASELINES = ("all_on_demand", "reserve_peak", "lookback_p50", "online_breakeven")


DEV = [
    ("training/helios_earth_gpu_demand_minutely.csv", "helios-earth", None),
    ("serving/servegen_rate_10min.csv", "m-large", RpsToGpus(2.0, 8)),
    ("serving/servegen_rate_10min.csv", "m-mid", RpsToGpus(2.0, 8)),
]


def _rows(shared_data: Path, rel: str, series: str, convert: RpsToGpus | None) -> dict[str, dict[str, float | None]]:
    demand = load_demand(shared_data / rel, series_id=series, convert=convert)[series]
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=168, lead_h=24)
    return run_series(cfg, demand)


@pytest.mark.data
@pytest.mark.parametrize(("rel", "series", "convert"), DEV)
def test_the_loops_procurer_beats_the_rules_that_ignore_the_level(
    shared_data: Path, rel: str, series: str, convert: RpsToGpus | None
) -> None:
    rows = _rows(shared_data, rel, series, convert)
    g = rows["gpufleet"]
    assert g["ratio_to_optimal"] is not None and g["ratio_to_optimal"] <= 1.15
    assert all(g["cost_usd"] < rows[b]["cost_usd"] for b in ("all_on_demand", "reserve_peak", "online_breakeven"))
    assert g["unmet_gpu_h"] == 0.0


@pytest.mark.data
@pytest.mark.parametrize(("rel", "series", "convert"), DEV)
def test_gpufleet_within_10pct_of_hindsight_and_below_every_baseline(
    shared_data: Path, rel: str, series: str, convert: RpsToGpus | None
) -> None:
    rows = _rows(shared_data, rel, series, convert)
    g = rows["gpufleet"]
    assert g["ratio_to_optimal"] is not None and g["ratio_to_optimal"] <= 1.10
    assert all(g["cost_usd"] < rows[b]["cost_usd"] for b in BASELINES)


@pytest.mark.data
@pytest.mark.parametrize(("term_h", "lead_h"), [(168, 24), (720, 168)])
def test_idle_gate_passes_the_mostly_idle_sd_model_at_both_terms(shared_data: Path, term_h: int, lead_h: int) -> None:
    """Alibaba SD busiest model (GPU-busy hours x100, mostly idle hours): before the idle gate gpufleet was 1.0126x
    and 1.0509x hindsight against all on-demand's 1.0014x (docs/benchmarks/generalize.md)."""
    from gpufleet.bench.generalize_data import procure_series

    demand = procure_series(shared_data)["sd:M0001x100"]
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=term_h, lead_h=lead_h)
    rows = run_series(cfg, demand)
    g = rows["gpufleet"]
    assert g["ratio_to_optimal"] is not None and g["ratio_to_optimal"] <= 1.0015
    assert all(g["cost_usd"] <= rows[b]["cost_usd"] + 1e-6 for b in BASELINES)
