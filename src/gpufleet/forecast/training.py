"""Training GPU demand = the known part (planned runs, the pending backlog) + the unknown part (experiments).

The unknown part is forecast from history with :class:`~gpufleet.forecast.auto.AutoForecaster` (Croston family
for lumpy series, the ensemble for smooth ones). The known part is exact arithmetic on registered intents:

* a planned run is the loop's registration, :class:`~gpufleet.ports.PlannedRunRegistration` (the calendar the
  procurer and the service read): it needs ``gpus`` from ``start_s`` for ``duration_s`` and happens at all with
  ``probability``. ``fit`` lays it on the forecast's grid (``origin_s`` = the start of step 0, ``step_s``): start
  step ``floor((start_s - origin_s) / step_s)``, ``max(1, ceil(duration_s / step_s))`` steps. A run that started
  before ``origin_s`` counts for the steps it still has. The caller passes the runs of the series' SKU;
  registrations are validated where they are made (the service, the scenario file), not here;
* a :class:`BacklogRequest` is already queued: it runs from ``start_step`` for ``duration_steps``.

Quantiles of the sum come from Monte Carlo with the generator passed in (per-step marginals: unknown demand drawn
by inverse CDF from its quantile forecast, each planned run drawn as happen/not). A big run either happens or not,
so its quantiles jump rather than smear.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.auto import AutoForecaster
from gpufleet.forecast.quantiles import DEFAULT_QUANTILES, FloatArray, check_quantiles, make_forecast
from gpufleet.ports import DemandForecast, PlannedRunRegistration

_GRID = tuple(round(x, 3) for x in np.linspace(0.01, 0.99, 50))


@dataclass(frozen=True, slots=True)
class _RunOnGrid:
    """A registration laid on the forecast's grid (``fit``)."""

    gpus: int
    start_step: int
    duration_steps: int
    probability: float


def _on_grid(run: PlannedRunRegistration, origin_s: int, step_s: int) -> _RunOnGrid:
    return _RunOnGrid(
        gpus=run.gpus,
        start_step=(run.start_s - origin_s) // step_s,
        duration_steps=max(1, -(-run.duration_s // step_s)),
        probability=run.probability,
    )


@dataclass(frozen=True, slots=True)
class BacklogRequest:
    gpus: int
    start_step: int
    duration_steps: int

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.start_step < 0 or self.duration_steps < 1:
            raise ValidationError("backlog", "gpus >= 0, start_step >= 0 and duration_steps >= 1 needed")


class TrainingForecaster:
    """Known + unknown training demand; ``fit(y, planned_runs=..., origin_s=..., step_s=..., backlog=...)`` then
    ``predict``."""

    name = "training"

    def __init__(self, seasons: Sequence[int] = (), *, rng: np.random.Generator, n_samples: int = 2000) -> None:
        self.seasons = tuple(seasons)
        self.rng = rng
        self.n_samples = n_samples

    def fit(
        self,
        y: FloatArray,
        *,
        planned_runs: Sequence[PlannedRunRegistration] = (),
        origin_s: int | None = None,
        step_s: int | None = None,
        backlog: Sequence[BacklogRequest] = (),
    ) -> Self:
        """``origin_s`` (the start of the forecast's step 0) and ``step_s`` (the grid's step) place the planned
        runs on the grid; both are needed when there are planned runs."""
        if planned_runs and (origin_s is None or step_s is None):
            raise ValidationError("origin_s", "origin_s and step_s are needed to place planned runs on the grid")
        if step_s is not None and step_s <= 0:
            raise ValidationError("step_s", f"must be > 0, got {step_s}")
        self.unknown_ = AutoForecaster(self.seasons).fit(y)
        self.planned_runs_ = tuple(planned_runs)
        self.runs_on_grid_ = tuple(_on_grid(r, origin_s or 0, step_s or 1) for r in self.planned_runs_)
        self.backlog_ = tuple(backlog)
        return self

    def known_mean(self, h: int) -> FloatArray:
        """Expected GPUs of the known part per step (exact, no sampling)."""
        out = np.zeros(h)
        for b in self.backlog_:
            out += b.gpus * _active(h, b.start_step, b.duration_steps)
        for r in self.runs_on_grid_:
            out += r.probability * r.gpus * _active(h, r.start_step, r.duration_steps)
        return out

    def predict(self, h: int, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> DemandForecast:
        qs = check_quantiles(quantiles)
        unk = self.unknown_.predict(h, _GRID)
        n = self.n_samples
        u = self.rng.uniform(_GRID[0], _GRID[-1], size=(n, h))
        grid = np.asarray(_GRID)
        samples = np.empty((n, h))
        for k in range(h):
            samples[:, k] = np.interp(u[:, k], grid, unk.values[:, k])
        for b in self.backlog_:
            samples += b.gpus * _active(h, b.start_step, b.duration_steps)[None, :]
        for r in self.runs_on_grid_:
            happens = self.rng.uniform(size=n) < r.probability
            samples += r.gpus * (happens[:, None] & _active(h, r.start_step, r.duration_steps)[None, :])
        values = np.quantile(samples, qs, axis=0)
        mean = unk.mean + self.known_mean(h)
        return make_forecast(mean, values, qs, f"{self.name}({unk.method})", floor=0.0)


def _active(h: int, start_step: int, duration_steps: int) -> npt.NDArray[np.bool_]:
    """Steps ``0..h-1`` in ``[start_step, start_step + duration_steps)``."""
    steps = np.arange(h)
    return (steps >= start_step) & (steps < start_step + duration_steps)
