"""The decision log: what the control loop decided, as the world applied it, with the decision's own reason code.

The world records here where it applies a decision (a reservation bought, refused or let expire, nodes launched on a
tier, idle nodes terminated, pods preempted, runs moved, nodes drained). Reasons come from the decisions; the log
does not invent any. A free-text reason such as ``"breakeven: 96 GPUs above 64 committed ..."`` is split into its
code (``breakeven``, the part before the first colon) and its detail (the whole text).

Bounded: reservation actions are kept one by one (there are few); frequent decisions (launches, scale-downs,
preemptions, moves, drains) are added up per day, SKU, region, action and reason. ``entries()`` coarsens those
sums to weeks, then months, then the whole run if the log would exceed ``limit`` entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.domain.allocations import Allocation
    from gpufleet.domain.pools import CapacityPool
    from gpufleet.domain.reservations import Reservation
    from gpufleet.ports import ReservationProposal

DAY_S = 86_400
DEFAULT_LIMIT = 400
BUCKETS_DAYS = (1, 7, 30)
# pools a placement passes over by rule, not for want of capacity (not a fallback)
RULES_NOT_FALLBACK = frozenset(
    {"reserved_not_launchable", "serving_never_spot", "serving_never_on_spot", "not_checkpointable"}
)


def split_reason(reason: str) -> tuple[str, str]:
    """``"code: detail"`` -> (``code``, the whole text); a bare code is its own detail."""
    text = reason.strip()
    code = text.split(":", 1)[0].strip() if ":" in text else text
    code = "_".join(code.split()) or "unspecified"
    return code, text


# aggregated key: (day, stage, action, reason, sku, region, unit)
_Key = tuple[int, str, str, str, str, str, str]


@dataclass(slots=True)
class DecisionLog:
    limit: int = DEFAULT_LIMIT
    events: list[dict[str, Any]] = field(default_factory=list)
    sums: dict[_Key, list[float]] = field(default_factory=dict)  # key -> [count, gpus, usd]
    details: dict[_Key, str] = field(default_factory=dict)  # the first detail seen for a key
    dropped: int = 0
    last_review: dict[str, tuple[int, str]] = field(default_factory=dict)  # sku -> (t_s, what procurement said)

    # ------------------------------------------------------------------ one by one (reservations)
    def record(
        self,
        t_s: int,
        stage: str,
        action: str,
        reason: str,
        *,
        sku: str | None = None,
        region: str | None = None,
        gpus: int | None = None,
        usd: float | None = None,
        detail: str = "",
    ) -> None:
        if len(self.events) >= self.limit // 2:
            self.dropped += 1
            return
        code, text = split_reason(reason)
        self.events.append(
            {
                "t_s": int(t_s),
                "day": round(t_s / DAY_S, 2),
                "stage": stage,
                "action": action,
                "reason": code,
                "sku": sku,
                "region": region,
                "gpus": gpus,
                "usd": None if usd is None else round(float(usd), 2),
                "detail": detail or text,
            }
        )

    def reservation(self, t_s: int, action: str, res: Reservation, pool: CapacityPool, reason: str) -> None:
        """A reservation was bought (or ordered pending approval), rejected, or expired."""
        detail = reason
        if action == "expired":
            seen = self.last_review.get(res.sku_id)
            if seen is not None:
                detail = f"{reason}; procurement's last review before it (day {seen[0] / DAY_S:.0f}): {seen[1]}"
        self.record(
            t_s,
            "procure",
            action,
            reason,
            sku=res.sku_id,
            region=pool.region_id,
            gpus=res.units,
            usd=float(res.est_cost_usd),
            detail=detail,
        )

    def reviewed(self, t_s: int, pool: CapacityPool, proposals: list[ReservationProposal]) -> None:
        """Procurement looked at a SKU: remember what it said (a later expiry quotes it); a review that bought
        nothing is counted, not listed."""
        if proposals:
            self.last_review[pool.sku_id] = (t_s, proposals[0].reason)
            return
        self.last_review[pool.sku_id] = (t_s, "proposed no new commitment")
        self.add(t_s, "procure", "held", "no_proposal", pool, 0, unit="reviews")

    # ------------------------------------------------------------------ added up per day
    def add(
        self,
        t_s: int,
        stage: str,
        action: str,
        reason: str,
        pool: CapacityPool | None,
        gpus: int,
        *,
        count: int = 1,
        unit: str = "nodes",
        usd: float = 0.0,
        sku: str | None = None,
    ) -> None:
        code, text = split_reason(reason)
        key: _Key = (
            int(t_s // DAY_S),
            stage,
            action,
            code,
            pool.sku_id if pool is not None else (sku or ""),
            pool.region_id if pool is not None else "",
            unit,
        )
        acc = self.sums.get(key)
        if acc is None:
            self.sums[key] = [float(count), float(gpus), float(usd)]
            self.details[key] = text
        else:
            acc[0] += count
            acc[1] += gpus
            acc[2] += usd

    def launched(self, t_s: int, pool: CapacityPool, nodes: int, gpus: int, alloc: Allocation) -> None:
        """Nodes launched where placement chose; passing over a usable tier for a lower one is a fallback."""
        skipped = [s for s in alloc.fallback if s.pool_id is not None and s.trigger not in RULES_NOT_FALLBACK]
        if not skipped:
            self.add(t_s, "place", "scale_up", alloc.reason, pool, gpus, count=nodes)
            return
        why = ", ".join(f"{s.tier.value if s.tier else s.pool_id} {s.trigger}" for s in skipped)
        self.add(t_s, "place", "fallback", f"{alloc.reason}: after skipping {why}", pool, gpus, count=nodes)

    # ------------------------------------------------------------------ output
    def entries(self) -> list[dict[str, Any]]:
        """Every kept entry, oldest first, at most ``limit`` of them (sums coarsened to fit)."""
        room = max(self.limit - len(self.events), 0)
        rows: list[dict[str, Any]] = []
        for bucket in (*BUCKETS_DAYS, None):
            rows = self._bucketed(bucket)
            if len(rows) <= room:
                break
        if len(rows) > room:  # still too many kinds: keep the largest
            rows = sorted(rows, key=lambda r: -(r["gpus"] or 0))[:room]
        out = [*self.events, *rows]
        out.sort(key=lambda r: (r["t_s"], r["stage"], r["action"], r["reason"], r["sku"] or ""))
        return out

    def _bucketed(self, days: int | None) -> list[dict[str, Any]]:
        merged: dict[_Key, list[float]] = {}
        first_day: dict[_Key, int] = {}
        last_day: dict[_Key, int] = {}
        detail: dict[_Key, str] = {}
        for key, (n, g, u) in self.sums.items():
            day = key[0]
            b = 0 if days is None else day // days * days
            k2: _Key = (b, *key[1:])
            acc = merged.setdefault(k2, [0.0, 0.0, 0.0])
            acc[0] += n
            acc[1] += g
            acc[2] += u
            first_day[k2] = min(first_day.get(k2, day), day)
            last_day[k2] = max(last_day.get(k2, day), day)
            detail.setdefault(k2, self.details[key])
        rows = []
        for k2, (n, g, u) in merged.items():
            _b, stage, action, code, sku, region, unit = k2
            d0, d1 = first_day[k2], last_day[k2]
            span = f"day {d0}" if d0 == d1 else f"days {d0}-{d1}"
            rows.append(
                {
                    "t_s": d0 * DAY_S,
                    "day": float(d0),
                    "stage": stage,
                    "action": action,
                    "reason": code,
                    "sku": sku or None,
                    "region": region or None,
                    "gpus": int(g) if unit != "reviews" else None,
                    "usd": round(u, 2) if u else None,
                    "detail": f"{int(n):,} {unit if n != 1 else unit.removesuffix('s')}, {span}: {detail[k2]}",
                }
            )
        return rows
