"""``gpufleet serve --provider aws --dry-run``: the AWS calls the server would make at startup, made against
nothing. Nothing is written to the database and no request leaves the process (the clients answer every call
with an empty response after validating it against botocore's model; see ``adapters.aws.session``).

What runs: the reconciler's provider side -- approved reservations are submitted (lookup by idempotency tag, then
CreateCapacityReservation with the reservation's key as ClientToken), submitted and active ones are described --
then the quota read of every configured region and the price read of every SKU (what the quota outlook and the
catalog sync would call).
"""

from __future__ import annotations

from sqlalchemy import select

from gpufleet.adapters.providers import OrderRequest, ProviderLifecycle
from gpufleet.adapters.sql.models import ReservationRow
from gpufleet.service.bootstrap import Services
from gpufleet.service.uow import UnitOfWork


def dry_run_startup(services: Services) -> int:
    """Make (dry) every startup call; returns how many calls were recorded."""
    world = services.aws
    if world is None or not world.config.dry_run:
        raise ValueError("dry_run_startup needs the AWS provider in dry-run mode")
    with UnitOfWork(services.engine, write=False) as uow:
        rows = uow.session.scalars(
            select(ReservationRow).where(ReservationRow.status.in_(["approved", "blocked", "submitted", "active"]))
        ).all()
        approved = [
            (r.idempotency_key, OrderRequest(r.sku_id, r.region_id, r.units, r.term_months, r.start_s))
            for r in rows
            if r.status in ("approved", "blocked")
        ]
        described = [
            str(r.provider_order_id) for r in rows if r.status in ("submitted", "active") and r.provider_order_id
        ]
    for key, order in approved:
        services.provider.submit(key, order)
    if described and isinstance(services.provider, ProviderLifecycle):
        services.provider.describe(described)
    for region in world.config.regions:
        world.quotas.read(region)
        world.prices.on_demand_usd_per_gpu_h(region, "h100_80gb")
        world.prices.spot_usd_per_gpu_h(region, "h100_80gb", since_s=services.clock.now_s() - 7 * 86400)
    return len(world.clients.dry_run_calls)
