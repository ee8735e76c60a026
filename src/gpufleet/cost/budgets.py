"""Budgets per window in USD or GPU-hours, alerts, and admission enforcement that never drops work.

Every request put to :func:`admit` gets exactly one decision: admit, degrade (a cheaper option that fits) or
queue (with the reason and when the window resets). There is no "reject" action on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum

from gpufleet.cost.allocate import CostLine
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.money import LEDGER_UNITS_PER_USD


class BudgetUnit(StrEnum):
    USD = "usd"
    GPU_H = "gpu_h"


@dataclass(frozen=True, slots=True)
class Budget:
    """A spending limit for one label value (e.g. team=search) over [window_start_s, window_end_s).

    ``limit`` is USD (exact Decimal) or GPU-hours per ``unit``. ``alert_at`` are fractions of the limit that raise
    an alert once crossed. ``enforce`` makes admission queue or degrade work that would cross the limit.
    """

    id: str
    dim: str
    key: str
    unit: BudgetUnit
    limit: Decimal
    window_start_s: int
    window_end_s: int
    alert_at: tuple[float, ...] = (0.5, 0.8, 1.0)
    enforce: bool = False

    def __post_init__(self) -> None:
        if self.limit < 0:
            raise ValidationError(f"budget[{self.id}].limit", "must be >= 0")
        if self.window_end_s <= self.window_start_s:
            raise ValidationError(f"budget[{self.id}].window_end_s", "must be after window_start_s")

    @property
    def limit_amount(self) -> int | float:
        """The limit in exact ledger units (USD budgets) or GPU-hours."""
        if self.unit is BudgetUnit.USD:
            return int(self.limit * LEDGER_UNITS_PER_USD)
        return float(self.limit)


@dataclass(frozen=True, slots=True)
class Spend:
    """What one label value has spent in a budget's window: exact units and GPU-hours."""

    units: int = 0
    gpu_h: float = 0.0

    def amount(self, unit: BudgetUnit) -> int | float:
        return self.units if unit is BudgetUnit.USD else self.gpu_h

    def plus(self, other: Spend) -> Spend:
        return Spend(self.units + other.units, self.gpu_h + other.gpu_h)


@dataclass(frozen=True, slots=True)
class BudgetAlert:
    budget_id: str
    level: str  # "info" | "warning" | "critical"
    reason: str  # "threshold_crossed" | "budget_exceeded" | "projected_over_budget"
    threshold: float
    fraction: float


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    budget: Budget
    spent: Spend
    fraction: float
    projected_fraction: float
    alerts: tuple[BudgetAlert, ...]


def evaluate_budget(budget: Budget, spent: Spend, now_s: int) -> BudgetStatus:
    """Fraction used, a straight-line projection to the window's end, and the alerts they raise."""
    limit = budget.limit_amount
    used = spent.amount(budget.unit)
    fraction = float(used) / float(limit) if limit > 0 else (float("inf") if used > 0 else 0.0)
    elapsed = min(max(now_s - budget.window_start_s, 0), budget.window_end_s - budget.window_start_s)
    length = budget.window_end_s - budget.window_start_s
    projected = fraction * length / elapsed if elapsed > 0 else fraction
    alerts: list[BudgetAlert] = []
    for thr in sorted(budget.alert_at):
        if fraction >= thr:
            level = "critical" if thr >= 1.0 else ("warning" if thr >= 0.8 else "info")
            reason = "budget_exceeded" if thr >= 1.0 else "threshold_crossed"
            alerts.append(BudgetAlert(budget.id, level, reason, thr, fraction))
    if fraction < 1.0 <= projected:
        alerts.append(BudgetAlert(budget.id, "warning", "projected_over_budget", 1.0, projected))
    return BudgetStatus(budget, spent, fraction, projected, tuple(alerts))


class AdmissionAction(StrEnum):
    ADMIT = "admit"
    DEGRADE = "degrade"
    QUEUE = "queue"


@dataclass(frozen=True, slots=True)
class CostOption:
    """A configuration a request can run in, with its estimated spend in the window (``est``: the budgets whose
    window holds now) and, for a run that goes on past it, in later windows (``later``: by budget id; a budget
    whose window starts after now is checked only when named here, i.e. when the run reaches into it)."""

    name: str
    est: Spend
    later: Mapping[str, Spend] = field(default_factory=dict)

    def est_in(self, b: Budget, now_s: int) -> Spend | None:
        """The option's spend in ``b``'s window; None when ``b`` does not apply (its window is over, or starts
        later and the option does not reach it)."""
        if b.window_start_s <= now_s < b.window_end_s:
            return self.est
        return self.later.get(b.id) if now_s < b.window_start_s else None


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """Work asking to start: its labels (team, tenant, feature, ...), its preferred option and cheaper fallbacks."""

    workload_id: str
    labels: Mapping[str, str]
    preferred: CostOption
    degrade_options: tuple[CostOption, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    workload_id: str
    action: AdmissionAction
    option: str | None
    reason: str
    budget_id: str | None = None
    retry_at_s: int | None = None


def _blocking(
    budgets: Sequence[Budget], labels: Mapping[str, str], opt: CostOption, spent: Mapping[str, Spend], now_s: int
) -> Budget | None:
    """The first enforced budget, of the current window or a later one the option reaches, it would overrun."""
    for b in budgets:
        est = opt.est_in(b, now_s)
        if not b.enforce or labels.get(b.dim) != b.key or est is None:
            continue
        after = spent.get(b.id, Spend()).plus(est)
        if after.amount(b.unit) > b.limit_amount:
            return b
    return None


def admit(
    requests: Sequence[AdmissionRequest], budgets: Sequence[Budget], spent: Mapping[str, Spend], now_s: int
) -> list[AdmissionDecision]:
    """Decide each request in order; admitted work counts against the budgets for the requests after it.

    ``spent`` maps budget id to what was already spent in its window (for a later window: what admitted work is
    committed to spend there). An option fits when it overruns no budget it touches: those whose window holds
    ``now_s`` and the later ones its ``later`` names. Over budget, the first degrade option that fits is taken; if
    none fits, the request is queued until the window of the preferred option's first refusing budget ends.
    """
    running = dict(spent)
    out: list[AdmissionDecision] = []
    for req in requests:
        decision: AdmissionDecision | None = None
        blocker = _blocking(budgets, req.labels, req.preferred, running, now_s)
        if blocker is None:
            decision = AdmissionDecision(req.workload_id, AdmissionAction.ADMIT, req.preferred.name, "within_budget")
            chosen = req.preferred
        else:
            chosen = None
            for opt in req.degrade_options:
                if _blocking(budgets, req.labels, opt, running, now_s) is None:
                    chosen = opt
                    decision = AdmissionDecision(
                        req.workload_id, AdmissionAction.DEGRADE, opt.name, "over_budget_degraded", blocker.id
                    )
                    break
            if decision is None:
                decision = AdmissionDecision(
                    req.workload_id, AdmissionAction.QUEUE, None, "over_budget_queued", blocker.id, blocker.window_end_s
                )
        if chosen is not None:
            for b in budgets:
                est = chosen.est_in(b, now_s)
                if req.labels.get(b.dim) == b.key and est is not None:
                    running[b.id] = running.get(b.id, Spend()).plus(est)
        out.append(decision)
    return out


def spend_for_budgets(
    budgets: Sequence[Budget],
    lines: Sequence[CostLine],
    allocations: Sequence[AllocationSpan],
    part_s: Mapping[str, int],
) -> dict[str, Spend]:
    """What each budget's label value spent according to one cost allocation (its ``lines`` and
    ``part_s_by_allocation``). The caller meters the window that matches the budgets' windows."""
    units: dict[tuple[str, str], int] = {}
    gpu_h: dict[tuple[str, str], float] = {}
    dims = {b.dim for b in budgets}
    for ln in lines:
        for d in dims:
            k = (d, ln.label(d))
            units[k] = units.get(k, 0) + ln.units
    for a in allocations:
        ps = part_s.get(a.id, 0)
        for d in dims:
            k = (d, a.label(d))
            gpu_h[k] = gpu_h.get(k, 0.0) + ps / PARTS_PER_GPU / 3600
    return {b.id: Spend(units.get((b.dim, b.key), 0), gpu_h.get((b.dim, b.key), 0.0)) for b in budgets}


# ---- windows and commitments (used by the service's admission) ------------------------------------------------
BUDGET_PERIODS = ("day", "week", "month")


def budget_window(period: str, now_s: int) -> tuple[int, int]:
    """The calendar window (UTC) containing ``now_s``: a day, an ISO week (Monday 00:00) or a month."""
    day = now_s // 86_400 * 86_400
    if period == "day":
        return day, day + 86_400
    if period == "week":
        start = day - ((now_s // 86_400 + 3) % 7) * 86_400  # 1970-01-01 was a Thursday
        return start, start + 7 * 86_400
    if period == "month":
        d = datetime.fromtimestamp(now_s, UTC)
        start_dt = datetime(d.year, d.month, 1, tzinfo=UTC)
        end_dt = datetime(d.year + (d.month == 12), d.month % 12 + 1, 1, tzinfo=UTC)
        return int(start_dt.timestamp()), int(end_dt.timestamp())
    raise ValidationError("period", f"must be one of {', '.join(BUDGET_PERIODS)}, got {period!r}")


MAX_BUDGET_WINDOWS = 62  # windows admission checks a run over: two months of day budgets, a year of week budgets


def budget_windows(period: str, start_s: int, end_s: int, cap: int = MAX_BUDGET_WINDOWS) -> list[tuple[int, int]]:
    """The calendar windows [start_s, end_s) touches, in time order: the one holding ``start_s`` and each after it
    that starts before ``end_s``, at most ``cap`` of them (a run longer than that is not checked past the last)."""
    out = [budget_window(period, start_s)]
    while len(out) < cap and out[-1][1] < end_s:
        out.append(budget_window(period, out[-1][1]))
    return out


@dataclass(frozen=True, slots=True)
class Commitment:
    """Admitted work expected to spend ``rate_uusd_per_h`` micro-dollars per hour over [start_s, end_s)."""

    rate_uusd_per_h: int
    start_s: int
    end_s: int


def expected_units(rate_uusd_per_h: int, start_s: int, end_s: int, window: tuple[int, int]) -> int:
    """Ledger units (micro-dollar-hours x 3600 = micro-dollar-seconds) spent at a rate over the part of
    [start_s, end_s) inside the window."""
    lo, hi = max(start_s, window[0]), min(end_s, window[1])
    return rate_uusd_per_h * max(0, hi - lo)


def committed_units(commitments: Sequence[Commitment], now_s: int, window: tuple[int, int]) -> int:
    """What admitted work is still expected to spend in the window from ``now_s`` on. The part before ``now_s``
    is not counted: work that ran shows in the metered spend, so counting it here would count it twice."""
    return sum(expected_units(c.rate_uusd_per_h, max(c.start_s, now_s), c.end_s, window) for c in commitments)
