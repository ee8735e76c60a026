"""The reservation desk asks procurement again at the next daily pass after an approver rejected an order, when the
loop's procurer asks for it (``retry_rejected``); otherwise the next review is the next procurement period's."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from gpufleet.ports import ApprovalDecision, ProcurementContext, ReservationProposal
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.run import gpufleet_loop
from gpufleet.sim.world import World

DAY = 86400


@dataclass
class _Procurer:
    retry_rejected: bool
    calls: list[tuple[int, str]] = field(default_factory=list)

    def propose(self, ctx: ProcurementContext) -> list[ReservationProposal]:
        self.calls.append((ctx.now_s // DAY, ctx.sku_id))
        if ctx.sku_id != "h100_80gb":
            return []
        pool = ctx.pool
        return [ReservationProposal(ctx.sku_id, pool.id, 8, ctx.now_s + pool.lead_time_s, 3, "test")]


@dataclass
class _RejectFirst:
    seen: int = 0

    def decide(self, est_cost_usd: Decimal, threshold_usd: Decimal, reservation_id: str) -> ApprovalDecision:
        self.seen += 1
        return ApprovalDecision(2, ("a", "b"), self.seen > 1, 3600, "test")


def _reviews(retry: bool) -> tuple[list[tuple[int, str]], World]:
    sc = default_scenario(gpus=64, days=16)
    loop = gpufleet_loop(sc, 1)
    loop.procurer = proc = _Procurer(retry)
    loop.approver = _RejectFirst()
    w = World(sc, loop, seed=1)
    w.run(until_s=16 * DAY)
    return proc.calls, w


def test_a_rejected_order_is_reviewed_again_the_next_day_for_its_sku_only() -> None:
    calls, w = _reviews(retry=True)
    assert calls == [(7, "h100_80gb"), (7, "l40s"), (8, "h100_80gb"), (14, "h100_80gb"), (14, "l40s")]
    bought = [r for r in w.desk.reservations if r.history[0].actor != "initial"]
    statuses = [r.status.value for r in bought if r.sku_id == "h100_80gb"]
    assert statuses[:2] == ["rejected", "active"]
    reasons = [e for e in w.decisions.entries() if e.get("action") == "ordered"]
    assert any(str(e.get("reason", "")).startswith("retry_after_rejection") for e in reasons)


def test_without_retry_the_next_review_is_the_next_period() -> None:
    calls, _ = _reviews(retry=False)
    assert calls == [(7, "h100_80gb"), (7, "l40s"), (14, "h100_80gb"), (14, "l40s")]
