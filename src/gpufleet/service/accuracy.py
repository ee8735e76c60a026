"""Forecast accuracy tracking for the service: every capacity forecast served is stored with its issue time,
and scored on request against the daily demand the utilization records report since.

Recording (``record``, the capacity service's recorder): one ``forecast_issues`` row per distinct forecast
(series = SKU, model = the forecast's method, start = the first forecast day, step = 1 day, the quantile
matrix, and the MASE scale fixed at issue time: the in-sample seasonal-naive (7-day) MAE of the history the
forecast saw). The same forecast served again (same series, start, model and values) is stored once, by whichever
process serves it: the store is checked under a lock per series (a process's memory of what it stored only spares it
the round trip). Each ``days`` of the endpoint is a distinct forecast, so at most ``MAX_STORED_PER_DAY`` are stored
per series and issue day (the first ones served; the rest are served, not stored), except the control loop's own
forecast (the reconciler's pass, ``loop``), which is always stored: a viewer's reads cannot grow the store by 730
forecasts per SKU per day, nor crowd out the forecast the loop acts on.

Scoring (``accuracy``) is the control loop's :func:`gpufleet.control.forecasting.score_forecasts`: each stored
forecast is cut to the days that have fully elapsed (``start + (k+1) * 1 day <= now``) and scored with
``tracking.score`` via an :class:`~gpufleet.forecast.tracking.AccuracyTracker`. The actual of a day is its
GPU-seconds / 86400 summed over the utilization records of that SKU (the capacity forecast's own definition of
demand). A day without any record counts as missing (not as zero demand): it is left out of the scores, and so is
the day that ended last while its last hours may still be arriving: less than ``ingest_grace_h``
(GPUFLEET_INGEST_GRACE_H) after its end, with a source that reported that day not yet delivered past it
(service/late_hours.py, the rule the capacity forecast fills those hours by); summed, they would read as a fall in
demand. MASE uses the p50 as the point forecast. The work is bounded by ``last``: per series only the ``last`` most
recent forecasts with an elapsed day are read (and the actuals since the oldest of them); those without actuals on
their elapsed days are reported as pending, and so are the forecasts with no elapsed day yet (counted, not read).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
from sqlalchemy import Engine, func, select

from gpufleet.adapters.sql.models import ForecastIssueRow, SkuRow
from gpufleet.control.forecasting import LEVELS, IssuedForecast, mase_scale, score_forecasts
from gpufleet.domain.errors import PermissionDenied, ValidationError
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.late_hours import HOUR_S, late_hours
from gpufleet.service.uow import UnitOfWork
from gpufleet.service.utilization_reads import gpu_seconds_statement, per_period, watermarks_statement

DAY_S = 86400
_SEEN_MAX = 1024
MAX_STORED_PER_DAY = 8  # forecasts stored per series and issue day from reads (the loop's own come on top)


def _finite(x: float) -> float | None:
    return None if not math.isfinite(x) else round(x, 6)


class ForecastAccuracyService:
    def __init__(self, engine: Engine, clock: Clock, *, ingest_grace_h: int = 3) -> None:
        self._engine = engine
        self._clock = clock
        self._grace_h = ingest_grace_h
        self._watermarks = watermarks_statement()
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self._daily = gpu_seconds_statement(DAY_S)

    # ---- recording ---------------------------------------------------------------------------------------
    def record(
        self, sku_id: str, start_s: int, history: np.ndarray, band: np.ndarray, method: str, *, loop: bool = False
    ) -> None:
        """Store one served forecast (``band``: (h, 3) of the p10, p50, p90), once per distinct forecast, unless
        ``MAX_STORED_PER_DAY`` are stored for the series and day already and it is not the ``loop``'s own."""
        values = np.ascontiguousarray(np.asarray(band, dtype=np.float64).T)
        key = hashlib.sha256(f"{sku_id}|{start_s}|{method}|".encode() + values.tobytes()).digest()
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return
        scale = mase_scale(np.asarray(history, dtype=np.float64))
        model, values_json = method[:128], json.dumps(values.tolist())
        # the memory above only spares this process a write: the store decides, under a lock per series, so other
        # replicas, a restarted process and concurrent requests serving the same forecast store it once
        same = (
            select(ForecastIssueRow.id)
            .where(
                ForecastIssueRow.series_id == sku_id,
                ForecastIssueRow.start_s == start_s,
                ForecastIssueRow.step_s == DAY_S,
                ForecastIssueRow.model == model,
                ForecastIssueRow.values_json == values_json,
            )
            .limit(1)
        )
        that_day = select(func.count()).where(ForecastIssueRow.series_id == sku_id, ForecastIssueRow.start_s == start_s)
        with UnitOfWork(self._engine, write=True) as uow:
            uow.serialize("forecast_issue", [sku_id])
            full = not loop and int(uow.session.scalar(that_day) or 0) >= MAX_STORED_PER_DAY
            if not full and uow.session.execute(same).first() is None:
                uow.session.add(
                    ForecastIssueRow(
                        series_id=sku_id,
                        model=model,
                        issued_at_s=self._clock.now_s(),
                        start_s=start_s,
                        step_s=DAY_S,
                        scale=float(scale),
                        quantiles_json=json.dumps(list(LEVELS)),
                        values_json=values_json,
                    )
                )
                uow.commit()
        with self._lock:
            self._seen[key] = None
            while len(self._seen) > _SEEN_MAX:
                self._seen.popitem(last=False)

    # ---- scoring -----------------------------------------------------------------------------------------
    def accuracy(self, actor: Actor, *, sku_id: str | None, last: int) -> dict[str, Any]:
        """Per series: the mean MASE / pinball / 80% coverage of its last ``last`` scored forecasts, and each."""
        if actor.role is Role.APP_TEAM:
            raise PermissionDenied("app_team tokens do not read fleet capacity plans")
        if not 1 <= last <= 1000:
            raise ValidationError("last", "must be in 1..1000")
        now_s = self._clock.now_s()
        today_s = now_s // DAY_S * DAY_S
        elapsed = ForecastIssueRow.start_s + ForecastIssueRow.step_s <= now_s  # at least one day to score
        with UnitOfWork(self._engine, write=False) as uow:
            if sku_id is not None:
                if uow.session.get(SkuRow, sku_id) is None:
                    raise ValidationError("sku", f"unknown SKU {sku_id!r}")
                names = [sku_id]
            else:
                names = list(uow.session.scalars(select(ForecastIssueRow.series_id).distinct()))
            issues: list[ForecastIssueRow] = []
            waiting: dict[str, int] = {}  # forecasts with no elapsed day yet: counted, not read
            for series in sorted(names):
                of_series = ForecastIssueRow.series_id == series
                recent = (
                    select(ForecastIssueRow)
                    .where(of_series, elapsed)
                    .order_by(ForecastIssueRow.issued_at_s.desc(), ForecastIssueRow.id.desc())
                    .limit(last)
                )
                issues.extend(reversed(list(uow.session.scalars(recent))))
                n = int(uow.session.scalar(select(func.count()).where(of_series, ~elapsed)) or 0)
                if n:
                    waiting[series] = n
            actuals: dict[str, dict[int, float]] = {}
            for series in sorted({r.series_id for r in issues}):
                first = min(r.start_s for r in issues if r.series_id == series)
                rows = per_period(
                    uow.session.execute(self._daily, {"sku": series, "since_s": first, "until_s": now_s}), DAY_S, now_s
                )
                actuals[series] = {int(d) * DAY_S: float(v) / DAY_S for d, v in rows}
                if now_s - today_s < self._grace_h * HOUR_S:  # the day just ended may still be being ingested
                    last_day = {"sku": series, "since_s": today_s - DAY_S, "until_s": today_s}
                    marks = (int(w) for _, w in uow.session.execute(self._watermarks, last_day))
                    if late_hours(marks, today_s, self._grace_h):
                        actuals[series].pop(today_s - DAY_S, None)
        stored = [
            IssuedForecast.of_quantiles(r.series_id, r.model, r.issued_at_s, r.start_s, r.step_s, r.scale,
                                        tuple(json.loads(r.quantiles_json)),
                                        np.asarray(json.loads(r.values_json), dtype=np.float64))
            for r in issues
        ]  # fmt: skip
        tracker, pending = score_forecasts(stored, actuals, now_s)
        for series, n in waiting.items():
            pending[series] = pending.get(series, 0) + n
        out = []
        for series in sorted({r.series_id for r in issues} | set(waiting)):
            recs = [x for x in tracker.history.get(series, []) if x.n_points > 0][-last:]
            models = sorted({x.model for x in recs})
            out.append(
                {
                    "series_id": series,
                    "forecasts_scored": len(recs),
                    "forecasts_pending": pending.get(series, 0),
                    "points": sum(x.n_points for x in recs),
                    "mase": _finite(float(np.nanmean([x.mase for x in recs]))) if recs else None,
                    "pinball": _finite(float(np.nanmean([x.pinball for x in recs]))) if recs else None,
                    "coverage_80": _finite(float(np.nanmean([x.coverage_80 for x in recs]))) if recs else None,
                    "by_model": {
                        m: {k: _finite(v) for k, v in tracker.summary(series, m, last=last).items()} for m in models
                    },
                    "forecasts": [
                        {
                            "model": x.model,
                            "issued_at_s": x.issued_at_s,
                            "points": x.n_points,
                            "mase": _finite(x.mase),
                            "pinball": _finite(x.pinball),
                            "coverage_80": _finite(x.coverage_80),
                        }
                        for x in recs
                    ],
                }
            )
        return {"now_s": now_s, "series": out}
