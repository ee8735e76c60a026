"""Capacity forecast over stored data: demand quantiles from the forecasting engine against supply.

Demand for a day is the mean number of GPUs allocated (GPU-seconds / 86400) from the utilization records,
aggregated in the database (up to 56 days). The model is the control loop's forecasting stage,
:func:`gpufleet.control.forecasting.demand_quantiles` (the engine's one call, with the seasonal-naive baseline
below 3 days of history). Fits are memoized on the exact input series, so repeated requests
between two ingestions do not refit; the answer is the same either way.

Supply for a day sums reservations covering that day (active and submitted as committed, approved and
pending approval as pending) plus on-demand and secondary quotas for the SKU. ``gap_units`` is the largest
shortfall of the p90 demand under total supply (0 when supply covers it). ``confidence`` is the share of the
last 7 observed days that fell inside the p10..p90 band when forecast from the days before them with the same
model (None with fewer than 21 days of history).
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
from sqlalchemy import Engine, String, bindparam, select

from gpufleet.adapters.sql.models import PoolRow, RegionRow, ReservationRow, SkuRow, UtilizationRow
from gpufleet.control.forecasting import band_coverage, demand_quantiles
from gpufleet.control.proposing import PlanRegion
from gpufleet.domain.errors import PermissionDenied, ValidationError
from gpufleet.domain.pools import Tier
from gpufleet.domain.reservations import ReservationStatus, term_seconds
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.late_hours import HOUR_S, fill_late_hours, hourly_gpus, late_hours
from gpufleet.service.plan_regions import pools_read, scoped
from gpufleet.service.utilization_reads import gpu_seconds_statement, per_period, watermarks_statement

DAY_S = 86400
HISTORY_DAYS = 56
COMMITTED = (ReservationStatus.ACTIVE.value, ReservationStatus.SUBMITTED.value)
PENDING = (ReservationStatus.APPROVED.value, ReservationStatus.BLOCKED.value, ReservationStatus.PENDING_APPROVAL.value)


@lru_cache(maxsize=128)
def _memo(y_bytes: bytes, h: int) -> tuple[np.ndarray, str, float | None]:
    y = np.frombuffer(y_bytes, dtype=np.float64)
    band, method = demand_quantiles(y, h)
    band.setflags(write=False)
    return band, method, band_coverage(y)


log = logging.getLogger(__name__)


class ForecastRecorder(Protocol):
    """Called with every served fleet-wide forecast: (SKU, start, daily history, band (h, 3) of LEVELS, method);
    ``loop``: the control loop's own forecast (the reconciler's pass), which a cap on stored forecasts never skips."""

    def __call__(
        self, sku_id: str, start_s: int, history: np.ndarray, band: np.ndarray, method: str, *, loop: bool = False
    ) -> None: ...


class CapacityService:
    def __init__(
        self, engine: Engine, clock: Clock, recorder: ForecastRecorder | None = None, *, ingest_grace_h: int = 3
    ) -> None:
        self._recorder = recorder
        self._grace_h = ingest_grace_h
        # plain reads, statements built once with bound parameters (see placement.py for why)
        self._engine = (
            engine.execution_options(isolation_level="AUTOCOMMIT") if engine.dialect.name == ("postgresql") else engine
        )
        self._clock = clock
        sku = bindparam("sku", type_=String())
        self._sku_exists = select(SkuRow.id).where(SkuRow.id == sku)
        self._daily = gpu_seconds_statement(DAY_S)
        self._hourly = gpu_seconds_statement(HOUR_S)  # the last day's hours still being ingested are filled
        self._watermarks = watermarks_statement()
        self._reservations = select(
            ReservationRow.units, ReservationRow.start_s, ReservationRow.term_months, ReservationRow.status
        ).where(ReservationRow.sku_id == sku, ReservationRow.status.in_(COMMITTED + PENDING))
        self._quotas = select(PoolRow.quota_gpus).where(
            PoolRow.sku_id == sku,
            PoolRow.tier.in_([Tier.ON_DEMAND.value, Tier.SECONDARY.value]),
            PoolRow.quota_gpus.is_not(None),
        )

    def forecast(
        self,
        actor: Actor,
        *,
        sku_id: str,
        days: int,
        region: str | None = None,
        plan: PlanRegion | None = None,
        loop: bool = False,
    ) -> dict[str, Any]:
        """Daily demand quantiles of ``sku_id`` against supply; with ``region``, demand from the utilization
        records whose pool is in the region and supply from its reservations and quotas only (records that name
        no pool belong to no region); with ``plan`` (a SKU planned in several regions, service/plan_regions.py),
        demand from the records the plan reads and supply from the plan region's reservations and the quotas of
        the regions it reads. Only fleet-wide forecasts are recorded for accuracy tracking (``loop``: the control loop's
        own, see :class:`ForecastRecorder`); a recording that fails is logged and skipped: the forecast is served."""
        if region is not None and plan is not None:
            raise ValueError("a forecast is scoped by region or by plan, not both")
        if actor.role is Role.APP_TEAM:
            raise PermissionDenied("app_team tokens do not read fleet capacity plans")
        if not 1 <= days <= 730:
            raise ValidationError("days", "must be in 1..730")
        today_s = self._clock.now_s() // DAY_S * DAY_S
        hist_start_s = today_s - HISTORY_DAYS * DAY_S
        with self._engine.connect() as conn:
            if conn.execute(self._sku_exists, {"sku": sku_id}).first() is None:
                raise ValidationError("sku", f"unknown SKU {sku_id!r}")
            daily, hourly, marks = self._daily, self._hourly, self._watermarks
            reservations, quota_stmt = self._reservations, self._quotas
            if region is not None:
                if conn.execute(select(RegionRow.id).where(RegionRow.id == region)).first() is None:
                    raise ValidationError("region", f"unknown region {region!r}")
                pools = select(PoolRow.id).where(PoolRow.region_id == region)
                daily = daily.where(UtilizationRow.pool_id.in_(pools))
                hourly = hourly.where(UtilizationRow.pool_id.in_(pools))
                marks = marks.where(UtilizationRow.pool_id.in_(pools))
                reservations = reservations.where(ReservationRow.region_id == region)
                quota_stmt = quota_stmt.where(PoolRow.region_id == region)
            if plan is not None:
                daily, hourly, marks = scoped(daily, plan), scoped(hourly, plan), scoped(marks, plan)
                reservations = reservations.where(ReservationRow.region_id == plan.region)
                quota_stmt = quota_stmt.where(pools_read(plan))
            rows = per_period(conn.execute(daily, {"sku": sku_id, "since_s": hist_start_s, "until_s": today_s}), DAY_S,
                              today_s)  # fmt: skip
            last_day = {"sku": sku_id, "since_s": today_s - DAY_S, "until_s": today_s}
            late = late_hours((int(w) for _, w in conn.execute(marks, last_day)), today_s, self._grace_h)
            if late:
                two_days = per_period(
                    conn.execute(hourly, {**last_day, "since_s": today_s - 2 * DAY_S}), HOUR_S, today_s
                )
            res = conn.execute(reservations, {"sku": sku_id}).all()
            quotas = conn.execute(quota_stmt, {"sku": sku_id}).scalars().all()
        arr = np.array(rows, dtype=np.float64).reshape(-1, 2)
        y = np.zeros(0)
        if arr.shape[0]:
            first_day = int(arr[:, 0].min())
            n_days = today_s // DAY_S - first_day
            y = np.zeros(n_days)
            y[arr[:, 0].astype(np.int64) - first_day] = arr[:, 1] / DAY_S
            if late:  # the last day's hours still being ingested read as the same hours the day before
                h = hourly_gpus(two_days, today_s // HOUR_S - 48, today_s)
                y[-1] += float(np.sum(fill_late_hours(h, late)[-24:] - h[-24:])) / 24
        band, method, confidence = _memo(np.ascontiguousarray(y, dtype=np.float64).tobytes(), days)
        if (
            self._recorder is not None and region is None and plan is None
        ):  # served fleet-wide forecasts are kept with their issue time (accuracy tracking, service/accuracy.py)
            try:
                self._recorder(sku_id, today_s, y, band, method, loop=loop)
            except Exception:  # a side effect of the read: its failure (a busy or read-only store) is not the reader's
                log.warning("forecast of %s not recorded for accuracy tracking", sku_id, exc_info=True)
        day_starts = today_s + DAY_S * np.arange(days)
        committed = np.zeros(days)
        pending = np.zeros(days)
        for units, start_s, term_months, status in res:
            end_s = start_s + term_seconds(term_months)
            covers = (day_starts + DAY_S > start_s) & (day_starts < end_s)
            (committed if status in COMMITTED else pending)[covers] += units
        quota = float(sum(q for q in quotas if q is not None))
        total = committed + pending + quota
        gap = float(np.max(band[:, 2] - total)) if days else 0.0
        demand = [
            {
                "day_start_s": int(d),
                "p10": round(float(b[0]), 3),
                "p50": round(float(b[1]), 3),
                "p90": round(float(b[2]), 3),
            }
            for d, b in zip(day_starts, band, strict=True)
        ]
        supply = [
            {
                "day_start_s": int(d),
                "committed_units": int(c),
                "pending_units": int(p),
                "quota_units": int(quota),
                "total_units": int(t),
            }
            for d, c, p, t in zip(day_starts, committed, pending, total, strict=True)
        ]
        return {
            "sku": sku_id,
            "region": region if plan is None else plan.region,
            "days": days,
            "demand": demand,
            "supply": supply,
            "gap_units": max(0, math.ceil(gap - 1e-9)),
            "confidence": confidence,
            "history_days": int(y.size),
            "method": method,
        }
