"""The procurement benchmark's done-when on the shared traces (skips when ../shared/data is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.bench.procure import RpsToGpus, load_demand, run_series
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.procure.replay import ReplayConfig

BASELINES = ("all_on_demand", "reserve_peak", "lookback_p50", "online_breakeven")


@pytest.mark.data
@pytest.mark.parametrize(
    ("rel", "series", "convert"),
    [
        ("training/helios_earth_gpu_demand_minutely.csv", "helios-earth", None),
        ("serving/servegen_rate_10min.csv", "m-large", RpsToGpus(2.0, 8)),
        ("serving/servegen_rate_10min.csv", "m-mid", RpsToGpus(2.0, 8)),
    ],
)
def test_gpufleet_within_10pct_of_hindsight_and_below_every_baseline(
    shared_data: Path, rel: str, series: str, convert: RpsToGpus | None
) -> None:
    demand = load_demand(shared_data / rel, series_id=series, convert=convert)[series]
    cfg = ReplayConfig.from_catalog("h100_80gb", prices=BUILTIN_PRICE_CATALOG, term_h=168, lead_h=24)
    rows = run_series(cfg, demand)
    g = rows["gpufleet"]
    assert g["ratio_to_optimal"] <= 1.10
    assert all(g["cost_usd"] < rows[b]["cost_usd"] for b in BASELINES)
    assert g["unmet_gpu_h"] == 0.0
