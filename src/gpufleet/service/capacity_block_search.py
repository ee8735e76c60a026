"""A search for Capacity Block offerings (AWS): region, SKU, GPU count, duration and date range, checked against
EC2's rules before the provider is asked, and the offerings the provider lists under it. A purchase is only ever
of an offering listed under the search sent with it (:mod:`gpufleet.service.capacity_blocks`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from gpufleet.adapters.sql.models import SkuRow
from gpufleet.domain.errors import ValidationError
from gpufleet.service.uow import UnitOfWork

if TYPE_CHECKING:
    from gpufleet.adapters.aws.capacity_blocks import CapacityBlockOffering
    from gpufleet.adapters.aws.world import AwsWorld

MAX_DURATION_H = 182 * 24


@dataclass(frozen=True, slots=True)
class BlockSearch:
    region: str
    sku_id: str
    gpus: int
    duration_h: int
    start_after_s: int
    end_before_s: int


def check_search(engine: Engine, world: AwsWorld, q: BlockSearch) -> None:
    """Refuse a search EC2 would refuse (or gpufleet cannot answer): the field named in the ValidationError."""
    if q.region not in world.config.regions:
        raise ValidationError("region", f"{q.region!r} is not a configured AWS region")
    with UnitOfWork(engine, write=False) as uow:
        if uow.session.get(SkuRow, q.sku_id) is None:
            raise ValidationError("sku", f"unknown SKU {q.sku_id!r}")
    if q.gpus <= 0:
        raise ValidationError("gpus", f"must be > 0, got {q.gpus}")
    days = q.duration_h // 24
    if q.duration_h % 24 or not 24 <= q.duration_h <= MAX_DURATION_H or (days > 14 and days % 7):
        raise ValidationError(  # EC2's rule: 1-day steps up to 14 days, then 7-day steps up to 182
            "duration_h",
            f"must be 1-14 whole days or whole weeks up to {MAX_DURATION_H // 24} days, got {q.duration_h} h",
        )
    if q.end_before_s <= q.start_after_s:
        raise ValidationError("end_before", "must be after start_after")


def list_offerings(world: AwsWorld, q: BlockSearch) -> list[CapacityBlockOffering]:
    return world.blocks.offerings(
        q.region,
        sku_id=q.sku_id,
        gpus=q.gpus,
        duration_h=q.duration_h,
        start_after_s=q.start_after_s,
        end_before_s=q.end_before_s,
    )
