"""Reserved capacity ahead of registered planned runs: the ``planned_run_reserve`` decision (issue 16).

A large pre-training run is registered ahead of time (:class:`~gpufleet.ports.PlannedRunRegistration`: name,
team, SKU, GPUs, start, duration, probability). Procurement that follows the GPUs in use cannot see it coming: the
run lands on the pay-per-use tiers, which have ceilings (spot and secondary capacity, the on-demand quota), and the
experiment stream queues behind it. This decision reads the calendar, never the world's draw of whether a run
happens (the loop learns that at the start, when the run's pods arrive or not, and from then on the run is in the
demand history the forecast-led rule reads).

At a procurement review, for one SKU-region: when a registered run of that SKU starts within ``review_gap_h`` after
the earliest landing of an order placed now (``now + lead``; the last review whose order still lands before the
start, or the first one after registration if it is already too late to land before it), weigh whole reserved nodes
above ``have`` (the committed capacity at the lead time plus what the forecast-led rule buys now) over the hours a
commitment made now would cover (``lead .. lead + term``):

- demand scenarios: the projected demand path (the forecast-led rule's projection of the observed demand) plus every
  registered, not yet started run of the SKU that overlaps those hours, each going ahead with its probability
  (independently: all 2^k combinations, weighted). They are weighed hour by hour, where only the runs of that hour
  matter: the hours are cut where a run starts or ends, and in each piece the runs' total GPUs take their distinct
  values with their probabilities (:func:`run_distributions`), so many registered runs cost their distinct totals,
  not 2^k rows (a calendar is written by app_team tokens: 40 runs were petabytes). Past ``MAX_TOTALS`` distinct
  totals in a piece, each run's GPUs there are rounded up to a coarser step (never less demand than registered);
- each hour, the GPU above a capacity level is served by the cheapest tier with room: spot (``spot_share`` of demand
  within the spot capacity), the secondary provider, on demand within the quota, and past those ceilings it is not
  served at all: work queues. A queued GPU-hour is priced at ``shortage_weight`` on-demand GPU-hours (the
  experiments displaced by the run at the ceiling: their wait, not only their GPUs);
- a reserved GPU at a level saves the price of the tier it replaces in the hours demand reaches it and costs the
  reserved price in every hour of its term; a node is bought when its expected saving over the term is positive.
  The saving never grows with the level, so the worthwhile nodes are a prefix, found by bisection.

The capacity bought outlasts the run (a term of months against a run of weeks) and then serves experiments and
serving like any commitment; that later use is in the weighing through the projected path. Settings chosen on the
default scenario's tuning seeds 11-16 (docs/benchmarks/loop.md, "Session 17, planned runs").
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.ports import FloatArray, PlannedRunRegistration

HOUR_S = 3600
REASON = "planned_run_reserve"
MAX_TOTALS = 1024  # distinct totals of the runs' GPUs weighed in one piece of the term (run_distributions)


@dataclass(frozen=True, slots=True)
class TierPrices:
    """One SKU-region's prices (USD per GPU-hour) and what its pay-per-use tiers hold (GPUs)."""

    reserved: float
    on_demand: float
    spot: float
    secondary: float
    spot_share: float = 0.0  # share of demand that may ride spot
    spot_capacity_gpus: float = 0.0
    secondary_capacity_gpus: float = 0.0
    on_demand_quota_gpus: float = math.inf


def order_from_s(run: PlannedRunRegistration, lead_s: int, review_gap_s: int) -> int:
    """From when a review orders for ``run`` (:func:`due_runs`): the last review on the ``review_gap_s`` grid from
    time 0 whose order (``lead_s``) lands by the start, or the registration when it comes after that review (an order
    that may land after the start)."""
    return max((run.start_s - lead_s) // review_gap_s * review_gap_s, run.registered_s)


def due_runs(
    runs: Sequence[PlannedRunRegistration], sku_id: str, now_s: int, lead_s: int, review_gap_s: int
) -> list[PlannedRunRegistration]:
    """The registered runs of ``sku_id`` a review at ``now_s`` orders for, once per run on the grid: from
    :func:`order_from_s` for one ``review_gap_s`` and while the run has not started. Reviews on the grid order at
    the first one at or after it; a call between two (a review asked again after an approver rejected its order, or
    the service's daily pass) orders as the last review on the grid would have, for a run registered since too."""
    due = []
    for r in runs:
        if r.sku_id != sku_id or r.probability <= 0:
            continue
        at = order_from_s(r, lead_s, review_gap_s)
        if at <= now_s < min(at + review_gap_s, r.start_s):
            due.append(r)
    return due


def run_scenarios(runs: Sequence[PlannedRunRegistration], start_h: float, hours: int) -> tuple[FloatArray, FloatArray]:
    """Every combination of the runs going ahead: their GPUs per covered hour (rows; hour 0 = ``start_h`` hours
    after the epoch) and each row's probability."""
    k = len(runs)
    rows = np.zeros((2**k, hours))
    weights = np.ones(2**k)
    for i, go in enumerate(itertools.product((True, False), repeat=k)):
        for r, g in zip(runs, go, strict=True):
            weights[i] *= r.probability if g else 1.0 - r.probability
            if g:
                a = max(math.floor(r.start_s / HOUR_S - start_h), 0)
                b = min(math.ceil(r.end_s / HOUR_S - start_h), hours)
                if b > a:
                    rows[i, a:b] += r.gpus
    return rows, weights


def _totals(runs: Sequence[PlannedRunRegistration], step: int) -> dict[int, float] | None:
    """The distribution of the GPUs of ``runs`` going ahead independently, each run's GPUs rounded up to a
    multiple of ``step``: {total: probability}; None past :data:`MAX_TOTALS` totals (or one more than the runs:
    once ``step`` is at least every run's GPUs the totals are the multiples of it, and the caller stops doubling it)."""
    cap = max(MAX_TOTALS, len(runs) + 1)
    dist: dict[int, float] = {0: 1.0}
    for r in runs:
        g = -(-r.gpus // step) * step
        nxt: defaultdict[int, float] = defaultdict(float)
        for v, q in dist.items():
            if r.probability < 1.0:
                nxt[v] += q * (1.0 - r.probability)
            nxt[v + g] += q * r.probability
        if len(nxt) > cap:
            return None
        dist = nxt
    return dist


def run_distributions(
    runs: Sequence[PlannedRunRegistration], start_h: float, hours: int
) -> list[tuple[int, int, FloatArray, FloatArray]]:
    """The covered hours (hour 0 = ``start_h`` hours after the epoch) cut where a run starts or ends, each piece
    ``[a, b)`` with the distinct totals of the GPUs of the runs in it (:func:`run_scenarios`' rows there, equal ones
    merged) and their probabilities. Past :data:`MAX_TOTALS` totals each run's GPUs in the piece are rounded up to
    the least power-of-two step that keeps them within it."""
    spans = []
    for r in runs:
        a = max(math.floor(r.start_s / HOUR_S - start_h), 0)
        b = min(math.ceil(r.end_s / HOUR_S - start_h), hours)
        if b > a:
            spans.append((a, b, r))
    cuts = sorted({0, hours, *(x for a, b, _ in spans for x in (a, b))})
    out = []
    for a, b in itertools.pairwise(cuts):
        here = [r for x, y, r in spans if x <= a and b <= y]
        step = 1
        while (dist := _totals(here, step)) is None:
            step *= 2
        out.append((a, b, np.array(list(dist), dtype=np.float64), np.array(list(dist.values()))))
    return out


def expected_saving_usd(demand: FloatArray, weights: FloatArray, level: float, p: TierPrices, shortage: float) -> float:
    """Expected saving over the covered hours of one more reserved GPU at ``level`` (scenarios ``demand``: rows
    weighted by ``weights``): the price of the tier its GPU replaces in each hour, less the reserved price."""
    over = demand - level
    spot_room = np.minimum(p.spot_share * demand, p.spot_capacity_gpus)
    tiers = sorted(
        [(p.spot, spot_room), (p.secondary, np.full_like(demand, p.secondary_capacity_gpus))], key=lambda x: x[0]
    )
    edge1 = tiers[0][1]
    edge2 = edge1 + tiers[1][1]
    edge3 = edge2 + p.on_demand_quota_gpus
    price = np.where(
        over > edge3,
        shortage,
        np.where(over > edge2, p.on_demand, np.where(over > edge1, min(tiers[1][0], p.on_demand), tiers[0][0])),
    )
    save = np.where(over > 0, price, 0.0) - p.reserved
    return float((save.sum(axis=1) * weights).sum())


def _label(r: PlannedRunRegistration) -> str:
    """A registration as the reason shows it (braces doubled: the reason is a format string with ``{gpus}``)."""
    name = r.name.replace("{", "{{").replace("}", "}}")
    days = f"from day {r.start_s / 86400:.0f} for {r.duration_s / 86400:.0f} days"
    return f"{name} ({r.gpus} GPUs {days}, p={r.probability:.2f})"


@dataclass(frozen=True, slots=True)
class PlannedRunReserve:
    """The ``planned_run_reserve`` decision (module docstring). ``shortage_weight``: a GPU-hour of demand above
    every tier's ceiling, in on-demand GPU-hours; ``review_gap_h``: the time between procurement reviews."""

    shortage_weight: float = 20.0
    review_gap_h: int = 7 * 24

    def order_from_s(self, run: PlannedRunRegistration, lead_h: int) -> int:
        """From when this rule orders ahead of ``run`` (:func:`order_from_s` on its review grid)."""
        return order_from_s(run, lead_h * HOUR_S, self.review_gap_h * HOUR_S)

    def nodes(
        self,
        runs: Sequence[PlannedRunRegistration],
        *,
        sku_id: str,
        now_s: int,
        path: FloatArray,
        have: float,
        per: int,
        lead_h: int,
        prices: TierPrices,
    ) -> tuple[int, str]:
        """Whole nodes of ``per`` GPUs to reserve above ``have`` GPUs now, and why ('' when none).

        ``path`` is the projected demand over the hours a commitment made now covers (its length is the term)."""
        due = due_runs(runs, sku_id, now_s, lead_h * HOUR_S, self.review_gap_h * HOUR_S)
        if not due:
            return 0, ""
        term_h = len(path)
        start_h = now_s / HOUR_S + lead_h
        end_s = (start_h + term_h) * HOUR_S
        overlap = [
            r
            for r in runs
            if r.sku_id == sku_id
            and r.registered_s <= now_s < r.start_s
            and r.probability > 0
            and r.end_s > start_h * HOUR_S
            and r.start_s < end_s
        ]
        base = np.asarray(path, dtype=np.float64)
        pieces = [
            (base[a:b][None, :] + totals[:, None], w) for a, b, totals, w in run_distributions(overlap, start_h, term_h)
        ]
        shortage = self.shortage_weight * prices.on_demand
        top = max(0, math.ceil((max(float(d.max()) for d, _ in pieces) - have) / per))

        def saving(level: float) -> float:
            return sum(expected_saving_usd(d, w, level, prices, shortage) for d, w in pieces)

        lo, hi = 0, top  # nodes[:lo] are worth it, nodes[hi:] are not
        while lo < hi:
            mid = (lo + hi) // 2
            if saving(have + per * mid + per / 2) > 0:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return 0, ""
        names = ", ".join(_label(r) for r in due)
        return lo, (
            f"{REASON}: {{gpus}} GPUs above {have:.0f} committed ahead of the registered run(s) {names}: expected to "
            f"save more than they cost over the term on the projected demand plus the registered runs, a GPU-hour "
            f"queued past the tiers' ceilings priced at {self.shortage_weight:g} on-demand GPU-hours"
        )
