"""Capacity Blocks for ML (AWS): list offerings for a SKU, GPU count, duration and date range; buy one.

Contract: a purchase is made only by a ``finops_admin``, only for an offering the provider still lists under the
same search, and only when its upfront fee is within the single-approver spend threshold
(``approval_threshold_usd``); above it the purchase is refused (409) -- a Capacity Block above the threshold would
need the reservation workflow's dual approval, which is not wired for blocks. The purchase is idempotent per
offering (key ``gpufleet-cb-<offering id>``, looked up at the provider before buying) and audited.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from gpufleet.adapters.sql.models import SkuRow
from gpufleet.domain.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork

if TYPE_CHECKING:
    from gpufleet.adapters.aws.capacity_blocks import CapacityBlockOffering
    from gpufleet.adapters.aws.world import AwsWorld

MAX_DURATION_H = 182 * 24


class CapacityBlockService:
    def __init__(self, engine: Engine, clock: Clock, world: AwsWorld, *, threshold_usd: Decimal) -> None:
        self._engine = engine
        self._clock = clock
        self._world = world
        self._threshold_usd = threshold_usd

    def offerings(
        self,
        actor: Actor,
        *,
        region: str,
        sku_id: str,
        gpus: int,
        duration_h: int,
        start_after_s: int,
        end_before_s: int,
    ) -> list[CapacityBlockOffering]:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)
        self._check(region, sku_id, gpus, duration_h, start_after_s, end_before_s)
        return self._world.blocks.offerings(
            region,
            sku_id=sku_id,
            gpus=gpus,
            duration_h=duration_h,
            start_after_s=start_after_s,
            end_before_s=end_before_s,
        )

    def purchase(
        self,
        actor: Actor,
        *,
        offering_id: str,
        region: str,
        sku_id: str,
        gpus: int,
        duration_h: int,
        start_after_s: int,
        end_before_s: int,
        budget_code: str,
    ) -> dict[str, Any]:
        actor.require(Role.FINOPS_ADMIN)
        listed = self.offerings(
            actor,
            region=region,
            sku_id=sku_id,
            gpus=gpus,
            duration_h=duration_h,
            start_after_s=start_after_s,
            end_before_s=end_before_s,
        )
        offer = next((o for o in listed if o.offering_id == offering_id), None)
        if offer is None:
            raise NotFoundError("capacity block offering", offering_id)
        if offer.upfront_fee_usd > self._threshold_usd:
            raise ConflictError(
                f"offering {offering_id} costs {offer.upfront_fee_usd} USD upfront, above the single-approver "
                f"threshold of {self._threshold_usd} USD; Capacity Blocks above it are not purchasable here"
            )
        bought = self._world.blocks.purchase(region, key=f"gpufleet-cb-{offering_id}", offering_id=offering_id)
        now_s = self._clock.now_s()
        out = {
            "capacity_reservation_id": bought.reservation_id,
            "offering_id": offering_id,
            "state": bought.state,
            "created": bought.created,
            "region": region,
            "availability_zone": offer.availability_zone,
            "instance_type": offer.instance_type,
            "instance_count": offer.instance_count,
            "start_s": offer.start_s,
            "end_s": offer.end_s,
            "upfront_fee_usd": str(offer.upfront_fee_usd),
            "budget_code": budget_code,
        }
        if bought.created:
            with UnitOfWork(self._engine, write=True) as uow:
                uow.audit(
                    at_s=now_s,
                    actor=actor.user_id,
                    action="capacity_block.purchased",
                    entity="capacity_block",
                    entity_id=bought.reservation_id,
                    detail=out,
                )
                uow.commit()
        return out

    def _check(self, region: str, sku_id: str, gpus: int, duration_h: int, start_s: int, end_s: int) -> None:
        if region not in self._world.config.regions:
            raise ValidationError("region", f"{region!r} is not a configured AWS region")
        with UnitOfWork(self._engine, write=False) as uow:
            if uow.session.get(SkuRow, sku_id) is None:
                raise ValidationError("sku", f"unknown SKU {sku_id!r}")
        if gpus <= 0:
            raise ValidationError("gpus", f"must be > 0, got {gpus}")
        if duration_h % 24 or not 24 <= duration_h <= MAX_DURATION_H:
            raise ValidationError("duration_h", f"must be whole days from 24 to {MAX_DURATION_H}, got {duration_h}")
        if end_s <= start_s:
            raise ValidationError("end_before", "must be after start_after")
