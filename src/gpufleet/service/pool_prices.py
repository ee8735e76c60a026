"""Keeping and reading the pools' past prices (:mod:`gpufleet.cost.prices` says what they mean)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select

from gpufleet.adapters.sql.models import PoolPriceRow, PoolRow
from gpufleet.control.metering import PriceHistory
from gpufleet.domain.pools import Tier
from gpufleet.service.uow import UnitOfWork

__all__ = ["price_history", "record_price_change"]


def record_price_change(uow: UnitOfWork, pool_id: str, old_uusd: int, new_uusd: int, at_s: int) -> None:
    """Keep ``old_uusd`` as the pool's price up to ``at_s`` when it changes to ``new_uusd`` then (call it with the
    pool's row locked, before the new price is written). A second change in the same second keeps the price
    before the first: the one in between was never charged for any time."""
    if int(old_uusd) == int(new_uusd):
        return
    stmt = uow.insert(PoolPriceRow).values(pool_id=pool_id, until_s=at_s, price_uusd_per_gpu_h=int(old_uusd))
    uow.session.execute(stmt.on_conflict_do_nothing(index_elements=["pool_id", "until_s"]))


def price_history(uow: UnitOfWork, since_s: int, pools: Iterable[PoolRow] | None = None) -> PriceHistory:
    """Every pool (``pools`` when the caller has read them already) with its current price and the changes after
    ``since_s`` (earlier ones cannot price anything from ``since_s`` on: an hour is charged at the first change
    after it, or the current price)."""
    s = uow.session
    if pools is None:
        pools = s.scalars(select(PoolRow)).all()
    changes = s.execute(
        select(PoolPriceRow.pool_id, PoolPriceRow.until_s, PoolPriceRow.price_uusd_per_gpu_h).where(
            PoolPriceRow.until_s > since_s
        )
    ).all()
    return PriceHistory.build(((p.id, Tier(p.tier), p.sku_id, int(p.price_uusd_per_gpu_h)) for p in pools), changes)
