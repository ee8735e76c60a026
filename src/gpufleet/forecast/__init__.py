"""Demand forecasting: serving (traffic -> GPUs) and training (known + lumpy unknown) models with calibrated,
non-crossing quantiles; backtests and accuracy tracking. Pure: no I/O. See docs/forecast.md.
"""

from gpufleet.forecast.auto import AutoForecaster
from gpufleet.forecast.base import ForecastModel
from gpufleet.forecast.capacity import (
    CapacityPolicy,
    GrowthScenario,
    SkuThroughput,
    apply_growth,
    capacity_forecast,
    gpus_needed,
)
from gpufleet.forecast.intermittent import IntermittentForecaster, classify
from gpufleet.forecast.loop import forecast_demand, seasons_for_step
from gpufleet.forecast.quantiles import DEFAULT_QUANTILES
from gpufleet.forecast.serving import ServingForecaster
from gpufleet.forecast.tracking import AccuracyRecord, AccuracyTracker, IssuedForecast
from gpufleet.forecast.training import BacklogRequest, TrainingForecaster

__all__ = [
    "DEFAULT_QUANTILES",
    "AccuracyRecord",
    "AccuracyTracker",
    "AutoForecaster",
    "BacklogRequest",
    "CapacityPolicy",
    "ForecastModel",
    "GrowthScenario",
    "IntermittentForecaster",
    "IssuedForecast",
    "ServingForecaster",
    "SkuThroughput",
    "TrainingForecaster",
    "apply_growth",
    "capacity_forecast",
    "classify",
    "forecast_demand",
    "gpus_needed",
    "seasons_for_step",
]
