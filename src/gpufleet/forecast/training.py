"""Training GPU demand = the known part (planned runs, the pending backlog) + the unknown part (experiments).

The unknown part is forecast from history with :class:`~gpufleet.forecast.auto.AutoForecaster` (Croston family
for lumpy series, the ensemble for smooth ones). The known part is exact arithmetic on registered intents:

* a :class:`PlannedTrainingRun` needs ``gpus`` for ``duration_steps`` starting anywhere in
  ``[earliest_start_step, latest_start_step]`` (uniform), and happens at all with ``probability``;
* a :class:`BacklogRequest` is already queued: it runs from ``start_step`` for ``duration_steps``.

Quantiles of the sum come from Monte Carlo with the generator passed in (per-step marginals: unknown demand drawn
by inverse CDF from its quantile forecast, each planned run drawn as happen/not and a start step). A big run
either happens or not, so its quantiles jump rather than smear.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.auto import AutoForecaster
from gpufleet.forecast.quantiles import DEFAULT_QUANTILES, FloatArray, check_quantiles, make_forecast
from gpufleet.ports import DemandForecast

_GRID = tuple(round(x, 3) for x in np.linspace(0.01, 0.99, 50))


@dataclass(frozen=True, slots=True)
class PlannedTrainingRun:
    run_id: str
    gpus: int
    earliest_start_step: int
    latest_start_step: int
    duration_steps: int
    probability: float = 1.0

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.duration_steps < 1:
            raise ValidationError("planned_run", f"{self.run_id}: gpus >= 0 and duration_steps >= 1 needed")
        if not 0 <= self.earliest_start_step <= self.latest_start_step:
            raise ValidationError("planned_run", f"{self.run_id}: need 0 <= earliest_start_step <= latest_start_step")
        if not 0.0 <= self.probability <= 1.0:
            raise ValidationError("planned_run", f"{self.run_id}: probability must be in [0, 1]")


@dataclass(frozen=True, slots=True)
class BacklogRequest:
    gpus: int
    start_step: int
    duration_steps: int

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.start_step < 0 or self.duration_steps < 1:
            raise ValidationError("backlog", "gpus >= 0, start_step >= 0 and duration_steps >= 1 needed")


class TrainingForecaster:
    """Known + unknown training demand; ``fit(y, planned_runs=..., backlog=...)`` then ``predict``."""

    name = "training"

    def __init__(self, seasons: Sequence[int] = (), *, rng: np.random.Generator, n_samples: int = 2000) -> None:
        self.seasons = tuple(seasons)
        self.rng = rng
        self.n_samples = n_samples

    def fit(
        self,
        y: FloatArray,
        *,
        planned_runs: Sequence[PlannedTrainingRun] = (),
        backlog: Sequence[BacklogRequest] = (),
    ) -> Self:
        self.unknown_ = AutoForecaster(self.seasons).fit(y)
        self.planned_runs_ = tuple(planned_runs)
        self.backlog_ = tuple(backlog)
        return self

    def known_mean(self, h: int) -> FloatArray:
        """Expected GPUs of the known part per step (exact, no sampling)."""
        steps = np.arange(h)
        out = np.zeros(h)
        for b in self.backlog_:
            out += b.gpus * ((steps >= b.start_step) & (steps < b.start_step + b.duration_steps))
        for r in self.planned_runs_:
            starts = np.arange(r.earliest_start_step, r.latest_start_step + 1)
            active = (steps[None, :] >= starts[:, None]) & (steps[None, :] < starts[:, None] + r.duration_steps)
            out += r.probability * r.gpus * active.mean(axis=0)
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
        steps = np.arange(h)
        for b in self.backlog_:
            samples += b.gpus * ((steps >= b.start_step) & (steps < b.start_step + b.duration_steps))[None, :]
        for r in self.planned_runs_:
            happens = self.rng.uniform(size=n) < r.probability
            start = self.rng.integers(r.earliest_start_step, r.latest_start_step + 1, size=n)
            active = (steps[None, :] >= start[:, None]) & (steps[None, :] < start[:, None] + r.duration_steps)
            samples += r.gpus * (active & happens[:, None])
        values = np.quantile(samples, qs, axis=0)
        mean = unk.mean + self.known_mean(h)
        return make_forecast(mean, values, qs, f"{self.name}({unk.method})", floor=0.0)
