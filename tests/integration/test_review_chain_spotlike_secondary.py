"""Review (chain): a secondary provider marked spot-like (a stored preemption rate above 0, e.g. a neocloud's
interruptible offer) on SQLite and PostgreSQL. Placement never gives its nodes to serving (``CapacityPool.allows``:
preemptible capacity is checkpointed training's only); the loop's procurement read over the same stored pools must
not count them as capacity serving can lean on."""

from __future__ import annotations

import numpy as np

from gpufleet.adapters.sql.models import PoolRow
from gpufleet.control.stockout_cover import StockoutCover
from gpufleet.service.capacity import CapacityService
from gpufleet.service.clock import FixedClock
from gpufleet.service.procurement import ProcurementService
from gpufleet.service.secondary_base import secondary_market
from gpufleet.service.uow import UnitOfWork
from tests.integration.conftest import NOW_S, Database

SKU = "h100_80gb"
SECONDARY = f"nebius/eu-north1/{SKU}/secondary"


def _spot_like_secondary(database: Database, quota: int) -> None:
    with UnitOfWork(database.engine, write=True) as uow:
        row = uow.session.get_one(PoolRow, SECONDARY)
        row.quota_gpus, row.preemption_rate_per_h = quota, 0.05
        uow.commit()


def test_a_spot_like_secondary_is_not_counted_in_servings_stockout_cover(database: Database) -> None:
    """Review (fixed), the defect: ``ProcurementService.tier_limits`` counted a secondary pool's quota as secondary
    capacity whatever its preemption rate, and serving's stock-out cover (``control/stockout_cover.py``: reserved +
    secondary must cover the serving asks) counted 64 GPUs serving is never placed on: a steady 64 GPUs of serving
    asks got no reserved cover at all, so an on-demand stock-out left every replica without a node."""
    _spot_like_secondary(database, 64)
    clock = FixedClock(NOW_S)
    procurement = ProcurementService(database.engine, clock, CapacityService(database.engine, clock), None)  # type: ignore[arg-type]
    limits = procurement.tier_limits([SKU])[SKU]
    assert limits.secondary_capacity_gpus == 0.0  # serving may not use it
    assert limits.spot_capacity_gpus == 64.0  # checkpointed training may, as on spot
    cover = StockoutCover().decide(np.full(48, 64.0), 0.0, limits, 8)
    assert cover.gpus == 64 and cover.reason.startswith("serving_stockout_cover")


def test_the_secondary_base_is_never_held_on_a_spot_like_secondary(database: Database) -> None:
    """Review (fixed), the defect: ``secondary_market`` chose the SKU's cheapest secondary pool with a quota, spot-like
    or not, so the loop's secondary base (nodes held under the GPUs rented on demand, serving's included) was
    weighed on a provider whose nodes only checkpointed training may use."""
    _spot_like_secondary(database, 64)
    with UnitOfWork(database.engine, write=False) as uow:
        assert secondary_market(uow.session, SKU) is None
