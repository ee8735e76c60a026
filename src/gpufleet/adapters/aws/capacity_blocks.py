"""Capacity Blocks for ML: offerings for a GPU count, duration and date range, and their purchase.

PurchaseCapacityBlock takes no ClientToken, so ``purchase(key, ...)`` tags the resulting capacity reservation
with ``gpufleet:idempotency-key`` and looks that tag up before buying: a retry after an unknown outcome finds
the first purchase instead of buying a second block. Anyone with ``ec2:CreateTags`` can put that tag on another
capacity reservation, so ``find`` takes a tagged one for the block only when it is a Capacity Block
(``ReservationType`` ``capacity-block``, set by EC2, not a tag) and, given the offering's :class:`BlockShape`, of
its instance type, count, start and end (a Capacity Block cannot be modified): anything else under the key is not a
purchase of gpufleet's (logged, left alone), and the offering is bought.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpufleet.adapters.aws.errors import call
from gpufleet.adapters.aws.reservations import KEY_TAG, epoch_s, ts
from gpufleet.adapters.aws.session import AwsClients
from gpufleet.adapters.aws.skus import SKU_BY_INSTANCE_TYPE, instance_type, instances_for

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CapacityBlockOffering:
    offering_id: str
    sku_id: str
    instance_type: str
    availability_zone: str
    instance_count: int
    start_s: int
    end_s: int
    duration_h: int
    upfront_fee_usd: Decimal
    currency: str


@dataclass(frozen=True, slots=True)
class BlockShape:
    """What a purchase of an offering holds at EC2 (a block cannot be modified): checked before a tagged
    capacity reservation is taken for it."""

    instance_type: str
    instance_count: int
    start_s: int
    end_s: int


def not_the_block(cr: dict[str, Any], shape: BlockShape | None) -> str:
    """Why the tagged capacity reservation is not the block ("" when it is): not a Capacity Block, or (given the
    offering's shape) another instance type, count, start or end."""
    if cr.get("ReservationType") != "capacity-block":
        return f"ReservationType {str(cr.get('ReservationType'))[:40]}, not a Capacity Block"
    if shape is None:
        return ""
    held = (str(cr.get("InstanceType")), _int(cr.get("TotalInstanceCount")), _epoch(cr.get("StartDate")),
            _epoch(cr.get("EndDate")))  # fmt: skip
    want = (shape.instance_type, shape.instance_count, shape.start_s, shape.end_s)
    return "" if held == want else f"holds {held}, the offering {want} (type, count, start, end)"


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _epoch(value: Any) -> int | None:
    try:
        return None if value is None else epoch_s(value)
    except (TypeError, ValueError, OverflowError):
        return None


@dataclass(frozen=True, slots=True)
class CapacityBlockPurchase:
    reservation_id: str
    offering_id: str
    state: str
    created: bool  # False: an earlier purchase under the same key was found


class AwsCapacityBlocks:
    def __init__(self, clients: AwsClients) -> None:
        self._clients = clients

    def offerings(
        self, region: str, *, sku_id: str, gpus: int, duration_h: int, start_after_s: int, end_before_s: int
    ) -> list[CapacityBlockOffering]:
        it = instance_type(sku_id)
        ec2 = self._clients.client("ec2", region)
        params: dict[str, Any] = {
            "InstanceType": it.name,
            "InstanceCount": instances_for(sku_id, gpus),
            "CapacityDurationHours": duration_h,
            "StartDateRange": ts(start_after_s),
            "EndDateRange": ts(end_before_s),
        }
        out: list[CapacityBlockOffering] = []
        token: str | None = None
        while True:
            if token:
                params["NextToken"] = token
            page = call("DescribeCapacityBlockOfferings", ec2.describe_capacity_block_offerings, **params)
            for o in page.get("CapacityBlockOfferings", []):
                itype = str(o.get("InstanceType", it.name))
                out.append(
                    CapacityBlockOffering(
                        str(o["CapacityBlockOfferingId"]),
                        SKU_BY_INSTANCE_TYPE.get(itype, sku_id),
                        itype,
                        str(o.get("AvailabilityZone", "")),
                        int(o.get("InstanceCount", 0)),
                        epoch_s(o.get("StartDate", 0)),
                        epoch_s(o.get("EndDate", 0)),
                        int(o.get("CapacityBlockDurationHours", 0)),
                        Decimal(str(o.get("UpfrontFee", "0"))),
                        str(o.get("CurrencyCode", "USD")),
                    )
                )
            token = page.get("NextToken")
            if not token:
                return sorted(out, key=lambda x: (x.start_s, x.upfront_fee_usd, x.offering_id))

    def find(self, region: str, key: str, shape: BlockShape | None = None) -> dict[str, Any] | None:
        """The block bought under ``key`` (the first tagged capacity reservation that is the block: see
        :func:`not_the_block`); None when none is. One tagged with the key that is not the block is logged."""
        ec2 = self._clients.client("ec2", region)
        page = call(
            "DescribeCapacityReservations",
            ec2.describe_capacity_reservations,
            Filters=[{"Name": f"tag:{KEY_TAG}", "Values": [key]}],
        )
        for cr in page.get("CapacityReservations", []):
            why = not_the_block(cr, shape)
            if not why:
                return dict(cr)
            cid = str(cr.get("CapacityReservationId"))[:40]
            log.warning("capacity reservation %s carries %s=%s but is not that block (%s): left alone", cid, KEY_TAG,
                        key, why)  # fmt: skip
        return None

    def purchase(
        self, region: str, *, key: str, offering_id: str, shape: BlockShape | None = None
    ) -> CapacityBlockPurchase:
        prior = self.find(region, key, shape)
        if prior is not None:
            return CapacityBlockPurchase(
                str(prior["CapacityReservationId"]), offering_id, str(prior.get("State", "")), created=False
            )
        ec2 = self._clients.client("ec2", region)
        out = call(
            "PurchaseCapacityBlock",
            ec2.purchase_capacity_block,
            CapacityBlockOfferingId=offering_id,
            InstancePlatform=self._clients.config.instance_platform,
            TagSpecifications=[
                {
                    "ResourceType": "capacity-reservation",
                    "Tags": [{"Key": KEY_TAG, "Value": key}, {"Key": "gpufleet:offering", "Value": offering_id}],
                }
            ],
        )
        cr = out.get("CapacityReservation", {})
        return CapacityBlockPurchase(
            str(cr.get("CapacityReservationId", "")), offering_id, str(cr.get("State", "")), created=True
        )
