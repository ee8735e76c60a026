"""The vocabulary of gpufleet: SKUs, pools and tiers, workloads, reservations, allocations, money.

Standard library only (an import-linter contract checks it).
"""

from gpufleet.domain.allocations import Allocation, FallbackStep, UtilizationRecord
from gpufleet.domain.errors import (
    CapacityUnavailable,
    ConflictError,
    GpufleetError,
    InvalidTransition,
    NotFoundError,
    PermissionDenied,
    ValidationError,
)
from gpufleet.domain.pools import TIER_ORDER, CapacityPool, Provider, Region, Tier
from gpufleet.domain.reservations import Reservation, ReservationStatus
from gpufleet.domain.skus import BUILTIN_SKUS, GpuSku, sku
from gpufleet.domain.workloads import (
    DegradeOption,
    Priority,
    ServingScaling,
    Team,
    Tenant,
    Workload,
    WorkloadKind,
    lost_work_s,
)

__all__ = [
    "BUILTIN_SKUS",
    "TIER_ORDER",
    "Allocation",
    "CapacityPool",
    "CapacityUnavailable",
    "ConflictError",
    "DegradeOption",
    "FallbackStep",
    "GpuSku",
    "GpufleetError",
    "InvalidTransition",
    "NotFoundError",
    "PermissionDenied",
    "Priority",
    "Provider",
    "Region",
    "Reservation",
    "ReservationStatus",
    "ServingScaling",
    "Team",
    "Tenant",
    "Tier",
    "UtilizationRecord",
    "ValidationError",
    "Workload",
    "WorkloadKind",
    "lost_work_s",
    "sku",
]
