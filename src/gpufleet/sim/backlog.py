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
    out = [0.0] * n_skus
    for j in range(len(work_s)):
        st = state[j]
        if st in (0, DONE) or serving[j] >= 0:
            continue
        left = max(0, start_s[j] + remaining_s[j] - horizon_s) if st == RUNNING else remaining_s[j]
        owed = min(work_s[j], max(0, horizon_s - arrival_s[j]))
        done = max(0, work_s[j] - left)
        if owed > done:
            out[sku[j]] += float((owed - done) * gpus[j])
    return out


def backlog_price_usd_h(on_demand_usd_h: float | None, billed_usd: float, allocated_gpu_h: float) -> float:
    """The price of a backlog GPU-hour on one SKU: the lower of its on-demand price (None: no on-demand tier) and
    the loop's billed cost per allocated GPU-hour there (no allocation: the on-demand price, else 0)."""
    own = billed_usd / allocated_gpu_h if allocated_gpu_h > 0 else None
    prices = [p for p in (on_demand_usd_h, own) if p is not None]
    return min(prices) if prices else 0.0
