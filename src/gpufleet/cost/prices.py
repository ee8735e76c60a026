"""The price a pay-per-use pool charged at a given moment: its current price, and the prices it had before each
change. The books and the budgets charge an hour at the price it was incurred at, so that a price change (a person's
registry update, the cloud price sync) re-prices only the hours after it.

A pool's history is a list of ``(until_s, price)``: the pool charged ``price`` up to ``until_s`` (exclusive) and
from the previous entry's ``until_s`` on (the first entry: since always). After the last entry it charges its current
price. A pool that never changed has no entries and charges its current price at every moment."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.domain.pools import Tier

__all__ = ["PoolPrice", "PriceHistory"]


@dataclass(frozen=True, slots=True)
class PoolPrice:
    tier: Tier
    sku_id: str
    price_uusd_per_gpu_h: int  # the current price
    until_s: tuple[int, ...] = ()  # the instants the price changed, ascending
    before: tuple[int, ...] = ()  # before[i]: the price up to until_s[i] (from until_s[i - 1] on)

    def at(self, t_s: int) -> int:
        i = bisect.bisect_right(self.until_s, t_s)
        return self.before[i] if i < len(self.before) else self.price_uusd_per_gpu_h


@dataclass(frozen=True, slots=True)
class PriceHistory:
    """Pools with their price history (see the module docstring)."""

    pools: Mapping[str, PoolPrice]
    _cuts: dict[str, tuple[int, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def build(
        cls, pools: Iterable[tuple[str, Tier, str, int]], changes: Iterable[tuple[str, int, int]]
    ) -> PriceHistory:
        """``pools``: (id, tier, sku, current price); ``changes``: (pool id, until_s, price before until_s)."""
        by_pool: dict[str, list[tuple[int, int]]] = {}
        for pool_id, until_s, price in changes:
            by_pool.setdefault(pool_id, []).append((int(until_s), int(price)))
        out = {}
        for pool_id, tier, sku_id, price in pools:
            hist = sorted(by_pool.get(pool_id, []))
            out[pool_id] = PoolPrice(tier, sku_id, int(price), tuple(u for u, _ in hist), tuple(p for _, p in hist))
        return cls(out)

    @property
    def changed(self) -> bool:
        """True when some pool's price changed (else every price is the current one at every moment)."""
        return any(p.until_s for p in self.pools.values())

    def at(self, pool_id: str, t_s: int) -> int | None:
        pool = self.pools.get(pool_id)
        return None if pool is None else pool.at(t_s)

    def cheapest_on_demand(self, sku_id: str, t_s: int) -> tuple[str, int] | None:
        """The SKU's cheapest on-demand pool at ``t_s`` (ties: the smallest id) and its price then."""
        best = min(
            (
                (p.at(t_s), pool_id)
                for pool_id, p in self.pools.items()
                if p.sku_id == sku_id and p.tier is Tier.ON_DEMAND
            ),
            default=None,
        )
        return None if best is None else (best[1], best[0])

    def cuts(self, sku_id: str, t0_s: int, t1_s: int) -> Sequence[int]:
        """The instants in (t0_s, t1_s) at which a price of one of the SKU's pools changed, ascending."""
        cuts = self._cuts.get(sku_id)
        if cuts is None:
            cuts = tuple(sorted({u for p in self.pools.values() if p.sku_id == sku_id for u in p.until_s}))
            self._cuts[sku_id] = cuts
        return cuts[bisect.bisect_right(cuts, t0_s) : bisect.bisect_left(cuts, t1_s)]
