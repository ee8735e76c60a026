"""From traffic to GPUs: the capacity model, and growth what-ifs on top of a statistical forecast.

GPUs needed at a step = ``ceil(rps * (1 + burst_headroom) / (rps_per_replica * target_utilization))`` replicas
(at least ``min_replicas``) x ``gpus_per_replica``. The map is non-decreasing in traffic, so applying it to each
traffic quantile gives the GPU quantiles exactly (quantiles commute with monotone maps) and they never cross.

Growth what-ifs (:class:`GrowthScenario`) multiply every quantile by ``factor_per_30d ** (t / 30 days)``: an
explicit assumption ("usage doubles monthly" = 2.0) layered on the forecast, never fitted from data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError
from gpufleet.domain.skus import GpuSku
from gpufleet.forecast.quantiles import FloatArray, make_forecast
from gpufleet.ports import DemandForecast

IntArray = npt.NDArray[np.int64]
_MONTH_S = 30 * 86400


@dataclass(frozen=True, slots=True)
class SkuThroughput:
    """Measured serving throughput of one replica on one SKU at the latency SLO."""

    sku_id: str
    rps_per_replica: float
    gpus_per_replica: int = 1

    def __post_init__(self) -> None:
        if self.rps_per_replica <= 0 or self.gpus_per_replica < 1:
            raise ValidationError("throughput", f"{self.sku_id}: rps_per_replica > 0 and gpus_per_replica >= 1")

    @classmethod
    def from_tokens(
        cls, sku_id: str, tokens_per_s_per_replica: float, tokens_per_request: float, gpus_per_replica: int = 1
    ) -> SkuThroughput:
        if tokens_per_request <= 0:
            raise ValidationError("tokens_per_request", "must be > 0")
        return cls(sku_id, tokens_per_s_per_replica / tokens_per_request, gpus_per_replica)

    @classmethod
    def scaled(cls, sku: GpuSku, rps_per_h100_replica: float, gpus_per_replica: int = 1) -> SkuThroughput:
        """A first guess from the catalog's relative throughput when no measurement exists yet."""
        return cls(sku.id, rps_per_h100_replica * sku.relative_throughput, gpus_per_replica)


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """``target_utilization``: share of replica throughput planned for (0.7 leaves room for latency);
    ``burst_headroom``: extra traffic share covered for sub-step bursts (0.2 = 20%)."""

    target_utilization: float = 0.7
    burst_headroom: float = 0.2
    min_replicas: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.target_utilization <= 1:
            raise ValidationError("target_utilization", "must be in (0, 1]")
        if self.burst_headroom < 0 or self.min_replicas < 0:
            raise ValidationError("burst_headroom", "burst_headroom and min_replicas must be >= 0")


def gpus_needed(rps: FloatArray, tp: SkuThroughput, policy: CapacityPolicy) -> IntArray:
    """GPUs for each traffic value (see module docstring)."""
    load = np.maximum(np.asarray(rps, dtype=np.float64), 0.0) * (1.0 + policy.burst_headroom)
    replicas = np.ceil(load / (tp.rps_per_replica * policy.target_utilization) - 1e-9)
    replicas = np.maximum(replicas, policy.min_replicas)
    return (replicas * tp.gpus_per_replica).astype(np.int64)


def capacity_forecast(
    traffic: DemandForecast, throughputs: Sequence[SkuThroughput], policy: CapacityPolicy
) -> dict[str, DemandForecast]:
    """GPU quantiles per SKU id for a traffic quantile forecast (rps): the one forecast type, its ``values`` and
    ``mean`` whole numbers of GPUs (as floats), non-crossing because :func:`gpus_needed` is monotone; ``method`` is
    the traffic forecast's method with ``+capacity:<sku_id>``."""
    return {
        tp.sku_id: DemandForecast(
            mean=gpus_needed(traffic.mean, tp, policy).astype(np.float64),
            levels=traffic.levels,
            values=gpus_needed(traffic.values, tp, policy).astype(np.float64),
            method=f"{traffic.method}+capacity:{tp.sku_id}",
        )
        for tp in throughputs
    }


@dataclass(frozen=True, slots=True)
class GrowthScenario:
    """A what-if: demand multiplies by ``factor_per_30d`` every 30 days (2.0 = doubles monthly)."""

    name: str
    factor_per_30d: float

    def __post_init__(self) -> None:
        if self.factor_per_30d <= 0:
            raise ValidationError("factor_per_30d", "must be > 0")


def apply_growth(fc: DemandForecast, scenario: GrowthScenario, step_s: int) -> DemandForecast:
    """The forecast under ``scenario``: step ``k`` (1-based) is scaled by ``factor ** (k * step_s / 30 days)``."""
    if step_s <= 0:
        raise ValidationError("step_s", "must be > 0")
    mult = scenario.factor_per_30d ** (np.arange(1, fc.horizon + 1) * step_s / _MONTH_S)
    return make_forecast(
        fc.mean * mult, fc.values * mult[None, :], fc.levels, f"{fc.method}+growth:{scenario.name}", floor=0.0
    )
