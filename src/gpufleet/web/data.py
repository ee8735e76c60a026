"""What the FinOps dashboard shows, as JSON-ready dicts, always filtered to the viewer's scope.

:class:`DashboardData` is the port the pages read through; :class:`CostDashboardData` implements it over the cost
package's results. A scope with a ``team_id`` sees only that team's lines, allocations, findings and
recommendations (an app team never sees another team); ``team_id=None`` (platform, finance) sees the fleet.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

import numpy as np

from gpufleet.control.metering import DailyUsage, FinOpsSnapshot
from gpufleet.cost.allocate import CostAllocation, apportion
from gpufleet.cost.chargeback import chargeback
from gpufleet.cost.meter import UsageTotals
from gpufleet.cost.model import IDLE_OWNER, SHARED_OWNER, AllocationSpan, LineKind
from gpufleet.cost.waste import idle_waste
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.money import usd_float
from gpufleet.domain.pools import Tier

BREAKDOWN_DIMS = ("team", "tenant", "feature", "namespace")
MAX_ROWS = 500  # rows of a list the JSON carries at most (the largest; its count and total cover all of them)


@dataclass(frozen=True, slots=True)
class Scope:
    """What a viewer may see: one team, or (``team_id=None``) the whole fleet."""

    team_id: str | None = None

    def sees(self, team_id: str) -> bool:
        return self.team_id is None or team_id == self.team_id


class DashboardData(Protocol):
    def overview(self, scope: Scope) -> dict[str, Any]: ...
    def breakdown(self, dim: str, scope: Scope) -> dict[str, Any]: ...
    def breakdown_csv(self, dim: str, scope: Scope) -> str: ...
    def reservations(self, scope: Scope) -> dict[str, Any]: ...
    def forecast(self, scope: Scope) -> dict[str, Any]: ...
    def opportunities(self, scope: Scope) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class CostDashboardData:
    """The reference data provider: a view of one metered window (:class:`FinOpsSnapshot`, the meter's books and
    what the cost package decided about them). ``reservations`` shows the snapshot's reserved capacity blocks
    (their owner team sees them)."""

    snapshot: FinOpsSnapshot

    def _team_of_workload(self) -> dict[str, str]:
        return {a.workload_id: a.team_id for a in self.snapshot.allocations}

    def _scoped(self, scope: Scope) -> tuple[CostAllocation, list[AllocationSpan], UsageTotals]:
        snap = self.snapshot
        if scope.team_id is None:
            return snap.result, list(snap.allocations), snap.usage
        keep = [j for j, a in enumerate(snap.allocations) if a.team_id == scope.team_id]
        lines = tuple(ln for ln in snap.result.lines if ln.team_id == scope.team_id)
        # the totals too: a team's CSV TOTAL row (and anything else summing the result) must be the team's own,
        # never the fleet's (fleet_units is the whole fleet's cost)
        total = sum(ln.units for ln in lines)
        direct = sum(ln.units for ln in lines if ln.kind is LineKind.DIRECT)
        res = dataclasses.replace(snap.result, lines=lines, fleet_units=total, direct_units=direct,
                                  idle_units=total - direct)  # fmt: skip
        idx = np.asarray(keep, dtype=np.int64)
        u = snap.usage
        usage = UsageTotals(u.samples[idx], u.util_sum[idx], u.used_gpu_s[idx], u.sampled_gpu_s[idx])
        return res, [snap.allocations[j] for j in keep], usage

    def overview(self, scope: Scope) -> dict[str, Any]:
        res, allocs, usage = self._scoped(scope)
        by_tier: dict[str, int] = defaultdict(int)
        by_kind: dict[str, int] = defaultdict(int)
        idle_by_pool: dict[str, int] = defaultdict(int)
        for ln in res.lines:
            by_tier[ln.tier] += ln.units
            by_kind[ln.kind.value] += ln.units
            if ln.kind is LineKind.IDLE:
                idle_by_pool[ln.pool_id] += ln.units
        total = sum(by_tier.values())
        team_rows = chargeback(res, allocs, "team", usage).rows
        alloc_h = sum(r.allocated_gpu_h for r in team_rows)
        used_h = sum(r.used_gpu_h for r in team_rows)
        measured_h = sum(r.measured_gpu_h for r in team_rows)
        daily = self.snapshot.daily.get(scope.team_id or "*")
        waste = idle_waste(res, allocs, usage)  # the one idle-waste definition (cost/waste.py)
        return {
            "scope": scope.team_id or "fleet",
            "window": {"start_s": res.t0_s, "end_s": res.t1_s},
            "kpis": {
                "cost_usd": usd_float(total),
                "idle_usd": usd_float(by_kind.get("idle", 0)),  # the ledger's idle lines = unallocated capacity
                "idle_fraction": by_kind.get("idle", 0) / total if total else 0.0,
                "idle_waste_usd": usd_float(waste.total_units),
                "idle_unbusy_usd": usd_float(waste.unbusy_units),
                "idle_unallocated_usd": usd_float(waste.unallocated_units),
                "idle_waste_fraction": waste.total_units / total if total else 0.0,
                "allocated_gpu_h": alloc_h,
                "used_gpu_h": used_h,
                "measured_gpu_h": measured_h,
                "utilization": used_h / measured_h if measured_h else None,
                "conserved": self.snapshot.result.conserved if scope.team_id is None else None,
            },
            "cost_by_tier": [{"tier": t.value, "usd": usd_float(by_tier.get(t.value, 0))} for t in Tier],
            "cost_by_kind": [{"kind": k.value, "usd": usd_float(by_kind.get(k.value, 0))} for k in LineKind],
            "idle_by_pool": [{"pool": p, "usd": usd_float(u)} for p, u in sorted(idle_by_pool.items())],
            "daily": _daily_dict(daily, scope),
        }

    def breakdown(self, dim: str, scope: Scope) -> dict[str, Any]:
        if dim not in BREAKDOWN_DIMS:
            raise ValidationError("dim", f"one of {', '.join(BREAKDOWN_DIMS)}, got {dim!r}")
        res, allocs, usage = self._scoped(scope)
        rep = chargeback(res, allocs, dim, usage, mode="showback")
        return {
            "scope": scope.team_id or "fleet",
            "dim": dim,
            "rows_total": len(rep.rows),  # the rows below are the MAX_ROWS largest; the CSV export has every row
            "rows": [
                {
                    "key": r.key,
                    "unallocated": r.key in (IDLE_OWNER, SHARED_OWNER),
                    "allocated_gpu_h": r.allocated_gpu_h,
                    "used_gpu_h": r.used_gpu_h,
                    "measured_gpu_h": r.measured_gpu_h,
                    "utilization": r.utilization,
                    "direct_usd": float(r.usd[0]),  # the apportioned cents: the rows add up to the fleet cost
                    "idle_usd": float(r.usd[1]),
                    "shared_usd": float(r.usd[2]),
                    "total_usd": float(r.total_usd),
                }
                for r in rep.rows[:MAX_ROWS]
            ],
        }

    def breakdown_csv(self, dim: str, scope: Scope) -> str:
        if dim not in BREAKDOWN_DIMS:
            raise ValidationError("dim", f"one of {', '.join(BREAKDOWN_DIMS)}, got {dim!r}")
        res, allocs, usage = self._scoped(scope)
        return chargeback(res, allocs, dim, usage, mode="showback").to_csv()

    def reservations(self, scope: Scope) -> dict[str, Any]:
        """The reservations in force in the window or later (one that ended before the window cost nothing in it).
        ``utilization`` is its pool's (the books fill a pool's reservations together; None for one not in force in
        the window) and ``idle_usd`` its share of its pool's idle cost, split by the reservations' costs in the
        window, so the rows' idle adds up to the pool's."""
        snap = self.snapshot
        t0_s, t1_s = snap.result.t0_s, snap.result.t1_s
        pools = {p.pool_id: p for p in snap.result.pools}
        blocks = [b for b in snap.capacity if b.tier is Tier.RESERVED and b.end_s > t0_s]
        idle_units: dict[str, int] = {}
        for pool_id in sorted({b.pool_id for b in blocks}):
            mine = [b for b in blocks if b.pool_id == pool_id]
            costs = [b.cost_units(t0_s, t1_s) for b in mine]
            p = pools.get(pool_id)
            if p is not None and sum(costs) > 0:
                idle_units |= dict(zip((b.id for b in mine), apportion(max(p.idle_units, 0), costs), strict=True))
        rows = []
        for b in blocks:
            if not scope.sees(b.owner_team_id or ""):
                continue
            p = pools.get(b.pool_id)
            util = p.allocated_gpu_h / p.capacity_gpu_h if p and p.capacity_gpu_h and b.start_s < t1_s else None
            rows.append(
                {
                    "id": b.id, "pool": b.pool_id, "sku": b.sku_id, "gpus": b.gpus, "owner": b.owner_team_id,
                    "start_s": b.start_s, "end_s": b.end_s, "days_to_expiry": (b.end_s - snap.now_s) / 86_400,
                    "utilization": util, "idle_usd": usd_float(idle_units.get(b.id, 0)),
                    "window_cost_usd": usd_float(b.cost_units(t0_s, t1_s)),
                }
            )  # fmt: skip
        reserved_h = sum(p.allocated_gpu_h for p in pools.values() if p.tier is Tier.RESERVED)
        all_h = sum(p.allocated_gpu_h for p in pools.values())
        return {
            "scope": scope.team_id or "fleet",
            "coverage": reserved_h / all_h if all_h and scope.team_id is None else None,
            "rows": sorted(rows, key=lambda r: r["end_s"]),
        }

    def forecast(self, scope: Scope) -> dict[str, Any]:
        f = self.snapshot.forecasts.get(scope.team_id or "*")
        if f is None:
            return {"scope": scope.team_id or "fleet", "series": None}
        fc, ac = np.asarray(f.forecast_gpus), np.asarray(f.actual_gpus)
        ok = ac > 0
        mape = float(np.mean(np.abs(fc[ok] - ac[ok]) / ac[ok])) if ok.any() else None
        return {"scope": scope.team_id or "fleet", "series": dataclasses.asdict(f), "mape": mape}

    def opportunities(self, scope: Scope) -> dict[str, Any]:
        """Idle findings (largest waste first) and rightsizing changes (largest saving first), at most
        ``MAX_ROWS`` of each; ``idle_total`` and ``rightsizing_total`` count and add up all of them."""
        team_of = self._team_of_workload()
        findings = sorted(
            (f for f in self.snapshot.idle if scope.sees(f.team_id)),
            key=lambda f: (-f.wasted_units, -f.idle_gpu_h, f.allocation_id),
        )
        changes = sorted(
            (r for r in self.snapshot.recommendations if r.changed and scope.sees(team_of.get(r.workload_id, ""))),
            key=lambda r: (-r.monthly_saving_usd, r.workload_id),
        )
        idle = [
            {
                "workload": f.workload_id, "team": f.team_id, "idle_h": f.idle_s / 3600, "idle_gpu_h": f.idle_gpu_h,
                "mean_util": f.mean_util, "wasted_usd": usd_float(f.wasted_units), "action": f.action.value,
                "reason": f.reason,
            }
            for f in findings[:MAX_ROWS]
        ]  # fmt: skip
        rights = [
            {
                "workload": r.workload_id, "team": team_of.get(r.workload_id, ""), "replicas": r.replicas,
                "current": dataclasses.asdict(r.current), "recommended": dataclasses.asdict(r.recommended),
                "reasons": list(r.reasons), "monthly_saving_usd": float(r.monthly_saving_usd),
            }
            for r in changes[:MAX_ROWS]
        ]  # fmt: skip
        return {
            "scope": scope.team_id or "fleet",
            "idle": idle,
            "idle_total": {"count": len(findings), "wasted_usd": usd_float(sum(f.wasted_units for f in findings))},
            "rightsizing": rights,
            "rightsizing_total": {
                "count": len(changes),
                "monthly_saving_usd": float(sum((r.monthly_saving_usd for r in changes), Decimal(0))),
            },
        }


def _daily_dict(daily: DailyUsage | None, scope: Scope) -> dict[str, Any] | None:
    """The daily series; the fleet's capacity only for a fleet-wide viewer (an app team's series carries none)."""
    if daily is None:
        return None
    out = dataclasses.asdict(daily)
    if scope.team_id is not None:
        out["capacity_gpu_h"] = None
    return out
