"""Which EC2 instance type sells each GPU SKU, and which Service Quotas bound it.

Running-instance quotas are counted in vCPUs per instance family group (P, G and VT); a quota in GPUs is the
vCPU quota divided by the instance type's vCPUs per GPU. Quota codes are AWS's (Service Quotas, service ``ec2``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    gpus: int
    vcpus: int
    family: str  # "P" or "G": the quota group

    @property
    def vcpus_per_gpu(self) -> int:
        return self.vcpus // self.gpus


INSTANCE_TYPES: dict[str, InstanceType] = {
    "b200": InstanceType("p6-b200.48xlarge", 8, 192, "P"),
    "h200_141gb": InstanceType("p5en.48xlarge", 8, 192, "P"),
    "h100_80gb": InstanceType("p5.48xlarge", 8, 192, "P"),
    "a100_80gb": InstanceType("p4de.24xlarge", 8, 96, "P"),
    "l40s": InstanceType("g6e.48xlarge", 8, 192, "G"),
    "l4": InstanceType("g6.48xlarge", 8, 192, "G"),
}

SKU_BY_INSTANCE_TYPE: dict[str, str] = {t.name: sku for sku, t in INSTANCE_TYPES.items()}


@dataclass(frozen=True, slots=True)
class QuotaCode:
    code: str
    family: str
    tier: str  # "on_demand" or "spot"
    name: str


QUOTA_CODES: tuple[QuotaCode, ...] = (
    QuotaCode("L-417A185B", "P", "on_demand", "Running On-Demand P instances"),
    QuotaCode("L-DB2E81BA", "G", "on_demand", "Running On-Demand G and VT instances"),
    QuotaCode("L-7212CCBC", "P", "spot", "All P Spot Instance Requests"),
    QuotaCode("L-3819A6DF", "G", "spot", "All G and VT Spot Instance Requests"),
)
QUOTA_BY_CODE: dict[str, QuotaCode] = {q.code: q for q in QUOTA_CODES}


def instance_type(sku_id: str) -> InstanceType:
    try:
        return INSTANCE_TYPES[sku_id]
    except KeyError:
        raise ValidationError("sku", f"no EC2 instance type is mapped for SKU {sku_id!r}") from None


def instances_for(sku_id: str, gpus: int) -> int:
    """Whole instances needed for ``gpus`` GPUs (AWS reserves and launches whole instances)."""
    return max(1, math.ceil(gpus / instance_type(sku_id).gpus))


def quota_code(sku_id: str, tier: str) -> QuotaCode:
    fam = instance_type(sku_id).family
    for q in QUOTA_CODES:
        if q.family == fam and q.tier == tier:
            return q
    raise ValidationError("tier", f"no running-instance quota for tier {tier!r}")
