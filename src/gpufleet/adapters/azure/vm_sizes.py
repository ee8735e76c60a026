"""Which Azure VM size sells each GPU SKU (8 GPUs each). Azure sells no L40S or L4 in an ND size and its Blackwell
sizes are GB200/GB300 (Grace) systems, not B200: an order of an unmapped SKU is refused before any call."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class VmSize:
    name: str
    gpus: int


VM_SIZES: dict[str, VmSize] = {
    "h200_141gb": VmSize("Standard_ND96isr_H200_v5", 8),
    "h100_80gb": VmSize("Standard_ND96isr_H100_v5", 8),
    "a100_80gb": VmSize("Standard_ND96amsr_A100_v4", 8),
}


def vm_size(sku_id: str) -> VmSize:
    try:
        return VM_SIZES[sku_id]
    except KeyError:
        raise ValidationError("sku", f"no Azure VM size is mapped for SKU {sku_id!r}") from None


def vms_for(sku_id: str, gpus: int) -> int:
    """Whole VMs needed for ``gpus`` GPUs (Azure reserves whole VMs)."""
    return max(1, math.ceil(gpus / vm_size(sku_id).gpus))
