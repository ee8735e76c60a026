"""What the simulation records as it runs: hourly fleet series, serving series, waits and counters."""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpufleet.domain.money import LEDGER_UNITS_PER_USD
from gpufleet.domain.pools import TIER_ORDER

HOUR_S = 3600


class Metrics:
    def __init__(self, sku_ids: list[str], fleet_names: list[str], days: int) -> None:
        hours = days * 24 + 1
        n = len(sku_ids)
        self.sku_ids = sku_ids
        self.fleet_names = fleet_names
        self.alloc = np.zeros((n, hours))
        self.pending = np.zeros((n, hours))
        self.paid = {t.value: np.zeros((n, hours)) for t in TIER_ORDER}
        self.cost_units = np.zeros(hours)  # fleet cost billed so far at each hour (ledger units, as float)
        self.rps = np.zeros((len(fleet_names), hours))
        self.replicas = np.zeros((len(fleet_names), hours))
        self.ready = np.zeros((len(fleet_names), hours))
        self.completed = 0
        self.placements: Counter[str] = Counter()
        self.stockouts = 0
        self.reservations_proposed = 0
        self.reserved_gpus_proposed = 0
        self.reservation_cost_usd = 0.0
        self.dual_approvals = 0

    def hourly(self, now_s: int, sku: int, alloc: int, pending: int, paid: dict[str, int]) -> None:
        h = now_s // HOUR_S
        self.alloc[sku, h] = alloc
        self.pending[sku, h] = pending
        for tier, v in paid.items():
            self.paid[tier][sku, h] = v

    def cost_so_far(self, now_s: int, units: int) -> None:
        self.cost_units[now_s // HOUR_S] = units

    def cost_usd_series(self) -> list[float]:
        """The fleet cost billed so far at each hour, in USD rounded to the cent."""
        return [round(float(c) / LEDGER_UNITS_PER_USD, 2) for c in self.cost_units]

    def demand_history(self, sku: int, upto_hour: int) -> np.ndarray:
        """Measured demand (GPUs allocated + pending) per hour before ``upto_hour``: what feeds the forecast."""
        return self.alloc[sku, :upto_hour] + self.pending[sku, :upto_hour]

    def in_use_history(self, sku: int, upto_hour: int) -> np.ndarray:
        """GPUs allocated per hour before ``upto_hour`` (the work that ran, without the queue)."""
        return self.alloc[sku, :upto_hour].astype(np.float64)

    def serving(self, fleet: int, now_s: int, rps: float, replicas: int, ready: int) -> None:
        if now_s % HOUR_S == 0:
            h = now_s // HOUR_S
            self.rps[fleet, h] = rps
            self.replicas[fleet, h] = replicas
            self.ready[fleet, h] = ready

    def job_done(self) -> None:
        self.completed += 1

    def placement(self, reason: str) -> None:
        self.placements[reason] += 1

    def stockout(self, in_stock: bool) -> None:
        if not in_stock:
            self.stockouts += 1

    def reservation_proposed(self, units: int, est_cost_usd: float, approvals: int) -> None:
        self.reservations_proposed += 1
        self.reserved_gpus_proposed += units
        self.reservation_cost_usd += est_cost_usd
        if approvals == 2:
            self.dual_approvals += 1
