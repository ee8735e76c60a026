"""Baseline metering: an exact ledger of what each workload, team, tenant and tier was charged.

Amounts are integer ledger units (see :mod:`gpufleet.domain.money`), so totals are exact and
``allocated + idle == fleet cost`` holds to the last unit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from gpufleet.domain.money import charge_units


@dataclass(slots=True)
class Ledger:
    by_team: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_tenant: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_tier: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_workload: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    allocated_units: int = 0

    def charge(
        self, *, team: str, tenant: str, workload: str, tier: str, price_uusd: int, gpus: int, seconds: int
    ) -> int:
        """Record ``gpus`` GPUs held for ``seconds`` at ``price_uusd`` per GPU-hour; returns the ledger units."""
        u = charge_units(price_uusd, gpus, seconds)
        if u:
            self.by_team[team] += u
            self.by_tenant[tenant] += u
            self.by_tier[tier] += u
            self.by_workload[workload] += u
            self.allocated_units += u
        return u
