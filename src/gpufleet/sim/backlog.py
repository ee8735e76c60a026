"""The training backlog at the horizon, and a loop's cost for the same work (issue 16, session 19).

A loop is billed for the hours inside the horizon, so a loop that leaves work queued at the end did less work and
pays less for it: a planned pre-training run that never starts is not billed at all, and the p95 queue wait, one
job among thousands, does not show it either. Comparing such a loop's bill with another's compares different
amounts of work. The hindsight bound (sim/bound.py) is the cost of the realized demand with every job run at its
arrival, billed inside the horizon, so the work it does by the horizon is, per training job,
``min(work, horizon - arrival)``.

The **backlog** of a loop is that work minus what the loop had done by the horizon (its work less what was left:
the remaining work of a queued job, ``start + remaining - horizon`` of a running one), per SKU, in GPU-seconds:
what the loop still owes of the realized demand that the bound had done. It is never negative: no job starts before
its arrival. Serving is not in it (serving's shortfall is its SLO attainment).

The **work-equal cost** adds the backlog priced at the lower of the SKU's on-demand price and what the loop paid per
GPU-hour of work on that SKU (its billed cost there over its allocated GPU-hours): the cheaper of finishing the work
without a commitment and finishing it the way the loop did the rest. The lower of the two keeps the figure from
penalizing a loop for more than either, so a comparison that holds on it holds with either price.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.sim.kinds import DONE, RUNNING


def backlog_gpu_s(
    *,
    work_s: Sequence[int],
    arrival_s: Sequence[int],
    state: Sequence[int],
    start_s: Sequence[int],
    remaining_s: Sequence[int],
    gpus: Sequence[int],
    serving: Sequence[int],
    sku: Sequence[int],
    horizon_s: int,
    n_skus: int,
) -> list[float]:
    """Per SKU, the GPU-seconds of training work the bound had done by ``horizon_s`` that the loop had not (module
    docstring). ``state`` 0 is a job that never arrived (a planned run that did not happen): not demand."""
    st = np.asarray(state, dtype=np.int64)
    work = np.asarray(work_s, dtype=np.int64)
    remaining = np.asarray(remaining_s, dtype=np.int64)
    left = np.where(
        st == RUNNING, np.maximum(0, np.asarray(start_s, dtype=np.int64) + remaining - horizon_s), remaining
    )
    owed = np.minimum(work, np.maximum(0, horizon_s - np.asarray(arrival_s, dtype=np.int64)))
    done = np.maximum(0, work - left)
    training = (st != 0) & (st != DONE) & (np.asarray(serving, dtype=np.int64) < 0)
    gpu_s = np.where(training, np.maximum(0, owed - done), 0) * np.asarray(gpus, dtype=np.int64)
    by_sku = np.bincount(np.asarray(sku, dtype=np.int64), weights=gpu_s.astype(np.float64), minlength=n_skus)
    return [float(x) for x in by_sku[:n_skus]]


def backlog_price_usd_h(on_demand_usd_h: float | None, billed_usd: float, allocated_gpu_h: float) -> float:
    """The price of a backlog GPU-hour on one SKU: the lower of its on-demand price (None: no on-demand tier) and
    the loop's billed cost per allocated GPU-hour there (no allocation: the on-demand price, else 0)."""
    own = billed_usd / allocated_gpu_h if allocated_gpu_h > 0 else None
    prices = [p for p in (on_demand_usd_h, own) if p is not None]
    return min(prices) if prices else 0.0
