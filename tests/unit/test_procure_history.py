"""Which demand history the world hands the procurer: GPUs in use + pending, or in use only (gpufleet's loop)."""

from __future__ import annotations

import numpy as np

from gpufleet.ports import ProcurementContext, ReservationProposal
from gpufleet.sim.builtin import steady_scenario
from gpufleet.sim.run import baseline_loop, gpufleet_loop
from gpufleet.sim.world import World


class _Recorder:
    """A procurer that buys nothing and keeps every history it was shown."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str, np.ndarray]] = []

    def propose(self, ctx: ProcurementContext) -> list[ReservationProposal]:
        self.seen.append((ctx.now_s, ctx.sku_id, np.array(ctx.demand_history_gpus, copy=True)))
        return []


def _histories(on_pending: bool) -> tuple[World, list[tuple[int, str, np.ndarray]]]:
    sc = steady_scenario(gpus=128, days=8, seed=3, jobs_per_day=400.0)
    sc = sc.model_copy(update={"control": sc.control.model_copy(update={"procurement_period_days": 1})})
    loop = baseline_loop(sc, 3)
    loop.procure_on_pending = on_pending
    rec = _Recorder()
    loop.procurer = rec
    w = World(sc, loop)
    w.run()
    return w, rec.seen


def test_the_procurer_sees_in_use_only_when_the_loop_says_so() -> None:
    w, seen = _histories(on_pending=False)
    assert seen
    m = w.metrics
    for now, sku, hist in seen:
        s, h = w.sku_ids.index(sku), now // 3600
        assert np.array_equal(hist, m.alloc[s, :h])  # without the queue
    # the default (every other loop): in use + pending, as before; the same world up to the procurer's view
    w2, queued = _histories(on_pending=True)
    assert len(queued) == len(seen)
    for now, sku, hist in queued:
        s, h = w2.sku_ids.index(sku), now // 3600
        assert np.array_equal(hist, w2.metrics.alloc[s, :h] + w2.metrics.pending[s, :h])
    assert float(w2.metrics.pending.sum()) > 0  # the test means something: work did queue


def test_only_gpufleet_procures_on_the_gpus_in_use() -> None:
    sc = steady_scenario(gpus=64, days=2)
    assert gpufleet_loop(sc, 1).procure_on_pending is False
    assert baseline_loop(sc, 1).procure_on_pending is True
