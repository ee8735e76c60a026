"""Accounting vocabulary: what the fleet paid for, who held it, and how well they used it.

Shares of a GPU are integer *parts*: one GPU is ``PARTS_PER_GPU`` = 840 parts (840 = lcm(1..8), so halves,
thirds, quarters, eighths and MIG sevenths are all whole numbers of parts). Time is integer seconds, prices are
integer micro-dollars per GPU-hour, so every cost is an exact integer of ledger units (see
:mod:`gpufleet.domain.money`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError
from gpufleet.domain.money import price_to_uusd
from gpufleet.domain.pools import Tier
from gpufleet.domain.reservations import Reservation

PARTS_PER_GPU = 840
IDLE_OWNER = "(idle)"
SHARED_OWNER = "(shared)"


class DistributionRule(StrEnum):
    """How idle capacity and shared allocations are charged."""

    TO_OWNER = "to_owner"  # idle: the team that owns the capacity; shared: the team that runs the shared service
    PROPORTIONAL = "proportional"  # spread over the consumers by their direct cost
    SEPARATE_LINE = "separate_line"  # kept as its own line, charged to nobody


class LineKind(StrEnum):
    DIRECT = "direct"  # the allocation's own share of its pool
    IDLE = "idle"  # capacity paid for and not allocated (incl. the unused part of reservations)
    SHARED = "shared"  # the cost of shared allocations, moved to receivers


def overlap_s(start_s: int, end_s: int, t0_s: int, t1_s: int) -> int:
    """Seconds of [start_s, end_s) inside the window [t0_s, t1_s)."""
    return max(0, min(end_s, t1_s) - max(start_s, t0_s))


@dataclass(frozen=True, slots=True)
class CapacityBlock:
    """GPUs a pool paid for over [start_s, end_s) at a price per GPU-hour.

    A reservation is one block spanning its term: its cost in a window is ``price * units * overlap``, i.e. the
    term's total amortized evenly over the term's seconds. ``owner_team_id`` receives idle under ``to_owner``.
    """

    id: str
    pool_id: str
    tier: Tier
    sku_id: str
    gpus: int
    start_s: int
    end_s: int
    price_uusd_per_gpu_h: int
    owner_team_id: str | None = None

    def __post_init__(self) -> None:
        if self.gpus <= 0:
            raise ValidationError(f"capacity[{self.id}].gpus", f"must be > 0, got {self.gpus}")
        if self.end_s <= self.start_s:
            raise ValidationError(f"capacity[{self.id}].end_s", "must be after start_s")
        if self.price_uusd_per_gpu_h < 0:
            raise ValidationError(f"capacity[{self.id}].price_uusd_per_gpu_h", "must be >= 0")

    @classmethod
    def from_reservation(
        cls, res: Reservation, tier: Tier = Tier.RESERVED, owner_team_id: str | None = None
    ) -> CapacityBlock:
        return cls(
            id=res.id,
            pool_id=res.pool_id,
            tier=tier,
            sku_id=res.sku_id,
            gpus=res.units,
            start_s=res.start_s,
            end_s=res.end_s,
            price_uusd_per_gpu_h=price_to_uusd(res.price_usd_per_gpu_h),
            owner_team_id=owner_team_id,
        )

    def cost_units(self, t0_s: int, t1_s: int) -> int:
        return self.price_uusd_per_gpu_h * self.gpus * overlap_s(self.start_s, self.end_s, t0_s, t1_s)

    def part_s(self, t0_s: int, t1_s: int) -> int:
        return self.gpus * PARTS_PER_GPU * overlap_s(self.start_s, self.end_s, t0_s, t1_s)


@dataclass(frozen=True, slots=True)
class AllocationSpan:
    """A workload holding ``parts`` of GPU (840 parts = 1 GPU) in a pool over [start_s, end_s).

    Labels (team, tenant, namespace, feature) are what chargeback groups by. ``shared`` marks a service used by
    many teams (an inference gateway, a shared embedding fleet) whose cost follows the shared rule.
    """

    id: str
    workload_id: str
    team_id: str
    tenant_id: str
    namespace: str
    feature: str
    pool_id: str
    sku_id: str
    parts: int
    start_s: int
    end_s: int
    shared: bool = False
    serving: bool = False

    def __post_init__(self) -> None:
        if self.parts <= 0:
            raise ValidationError(f"allocation[{self.id}].parts", f"must be > 0, got {self.parts}")
        if self.end_s <= self.start_s:
            raise ValidationError(f"allocation[{self.id}].end_s", "must be after start_s")

    @property
    def gpus(self) -> float:
        return self.parts / PARTS_PER_GPU

    def part_s(self, t0_s: int, t1_s: int) -> int:
        return self.parts * overlap_s(self.start_s, self.end_s, t0_s, t1_s)

    def label(self, dim: str) -> str:
        if dim == "workload":
            return self.workload_id
        if dim == "team":
            return self.team_id
        if dim == "tenant":
            return self.tenant_id
        if dim == "namespace":
            return self.namespace
        if dim == "feature":
            return self.feature
        raise ValidationError("group_by", f"unknown dimension {dim!r} (workload, team, tenant, namespace, feature)")


def gpu_parts(gpus: int = 0, *, num: int = 0, den: int = 1) -> int:
    """Parts for ``gpus`` whole GPUs plus a ``num/den`` fraction (e.g. MIG 1g of 7: ``num=1, den=7``)."""
    if den <= 0 or PARTS_PER_GPU % den != 0:
        raise ValidationError("den", f"a GPU share must divide {PARTS_PER_GPU}, got 1/{den}")
    return gpus * PARTS_PER_GPU + num * (PARTS_PER_GPU // den)


@dataclass(frozen=True, slots=True)
class UsageColumns:
    """Utilization samples in columns: sample i is allocation ``alloc_idx[i]`` in bucket ``bucket_idx[i]``.

    ``alloc_idx == -1`` marks a device that reported while no allocation held it (idle capacity); such samples
    are counted as unattributed, never charged.

    ``util`` is the mean activity (0..1) of the allocation's own share over the bucket (for a MIG slice, the
    slice's engine activity). Bucket ``k`` spans [origin_s + k*bucket_s, origin_s + (k+1)*bucket_s).
    """

    origin_s: int
    bucket_s: int
    bucket_idx: npt.NDArray[np.int32]
    alloc_idx: npt.NDArray[np.int32]
    util: npt.NDArray[np.float32]

    def __post_init__(self) -> None:
        n = len(self.util)
        if len(self.bucket_idx) != n or len(self.alloc_idx) != n:
            raise ValidationError("usage", "bucket_idx, alloc_idx and util must have the same length")
        if self.bucket_s <= 0:
            raise ValidationError("usage.bucket_s", f"must be > 0, got {self.bucket_s}")

    def __len__(self) -> int:
        return len(self.util)
