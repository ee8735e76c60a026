"""Serving's stock-out cover: reserved capacity so that serving never depends only on a pool that can stock out.

A serving replica needs a node when the autoscaler asks for it. Launched capacity can be refused: on-demand stocks
out (the simulator's on-demand stock-outs, a cloud's insufficient-capacity error) and spot is reclaimed (serving
never runs there). A replica asked while the SKU's on-demand pool is out waits for a node, and its fleet misses
requests (``no_capacity`` in the run summary). Capacity that does not stock out is the reserved pool and the
secondary provider's contracted capacity. The forecast-led rule reserves what saves money over the term; for a
SKU whose serving asks are above what it reserves plus the secondary capacity, a stock-out leaves replicas without
nodes. This rule tops the reserved capacity up so that **reserved + secondary cover the ``quantile`` of the
serving GPUs asked per hour over the last ``window_h`` hours** (whole nodes, each one needed: the last node bought
covers at least one GPU of that quantile). Spot never counts.

A pure decision (:meth:`StockoutCover.decide`): the observed serving asks (GPUs the replica autoscaler asked for
per hour, placed or not), the reserved GPUs committed when a new order would land, the secondary capacity and the
node size in; the GPUs to reserve with the reason code ``serving_stockout_cover`` out. The procurer
(:class:`~gpufleet.control.procurement.ForecastLedProcurer`) asks it after its own rule, with what that rule buys
in the same call counted as committed; the world (sim/desk.py, :attr:`ProcurementContext.serving_asks_gpus`)
only observes the asks and applies the reservation.

Settings (quantile, window) were chosen on the default scenario's tuning seeds 11-16, the miss diagnosis on seeds
17-30 (docs/benchmarks/loop.md, "Session 17, serving stock-out cover").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gpufleet.control.procurement import TierLimits
    from gpufleet.ports import FloatArray

REASON = "serving_stockout_cover"


@dataclass(frozen=True, slots=True)
class CoverDecision:
    """GPUs to reserve (whole nodes; 0 = none) and why: ``need_gpus`` is the quantile of the serving asks,
    ``held_gpus`` the reserved + secondary GPUs counted against it."""

    gpus: int
    need_gpus: float
    held_gpus: float
    reason: str


@dataclass(frozen=True, slots=True)
class StockoutCover:
    """Reserve whole nodes while reserved + secondary capacity is below the ``quantile`` of the serving GPUs asked
    per hour over the last ``window_h`` hours (at least ``min_history_h`` observed hours; module docstring)."""

    quantile: float = 0.75
    window_h: int = 7 * 24
    min_history_h: int = 24

    def decide(
        self, serving_asks_gpus: FloatArray | None, committed_gpus: float, limits: TierLimits, per: int
    ) -> CoverDecision:
        """The cover for one SKU: ``committed_gpus`` reserved when an order would land, ``limits`` the SKU's
        pay-per-use tiers (only the secondary provider's capacity counts), ``per`` GPUs per node."""
        held = float(committed_gpus) + float(limits.secondary_capacity_gpus)
        if serving_asks_gpus is None or per <= 0:
            return CoverDecision(0, 0.0, held, "")
        asks = np.asarray(serving_asks_gpus, dtype=np.float64)[-self.window_h :]
        asks = asks[np.isfinite(asks)]
        if len(asks) < self.min_history_h:
            return CoverDecision(0, 0.0, held, "")
        need = float(np.quantile(asks, self.quantile))
        nodes = max(0, math.ceil((need - held) / per - 1e-9))
        if nodes == 0:
            return CoverDecision(0, need, held, "")
        return CoverDecision(
            nodes * per,
            need,
            held,
            f"{REASON}: serving asked {need:.0f} GPUs or more in {1 - self.quantile:.0%} of the last "
            f"{len(asks)} hours; reserved ({float(committed_gpus):.0f}) + secondary "
            f"({float(limits.secondary_capacity_gpus):.0f}) hold {held:.0f}, so a stock-out of on-demand would "
            f"leave replicas without nodes: {nodes * per} GPUs reserved",
        )
