"""Which Compute Engine machine type sells each GPU SKU.

Accelerator-optimized machine types carry their GPUs (a reservation names the machine type only, as
``gcloud compute reservations create --machine-type=a3-highgpu-8g`` does). GCP sells no L40S; a reservation of it
is refused before any call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class MachineType:
    name: str
    gpus: int
    accelerator: str  # the accelerator type GCP names (information; not sent)
    vcpus: int  # the machine type's vCPUs and memory (GiB: GCP's "GB" of machine memory is 1024-based), as
    memory_gib: int  # Compute Engine's machine type tables list them; they price its core and RAM SKUs (prices.py)


MACHINE_TYPES: dict[str, MachineType] = {
    "b200": MachineType("a4-highgpu-8g", 8, "nvidia-b200", 224, 3968),
    "h200_141gb": MachineType("a3-ultragpu-8g", 8, "nvidia-h200-141gb", 224, 2952),
    "h100_80gb": MachineType("a3-highgpu-8g", 8, "nvidia-h100-80gb", 208, 1872),
    "a100_80gb": MachineType("a2-ultragpu-8g", 8, "nvidia-a100-80gb", 96, 1360),
    "l4": MachineType("g2-standard-96", 8, "nvidia-l4", 96, 384),
}


def machine_type(sku_id: str) -> MachineType:
    try:
        return MACHINE_TYPES[sku_id]
    except KeyError:
        raise ValidationError("sku", f"no Compute Engine machine type is mapped for SKU {sku_id!r}") from None


def machines_for(sku_id: str, gpus: int) -> int:
    """Whole machines needed for ``gpus`` GPUs (GCP reserves whole VMs)."""
    return max(1, math.ceil(gpus / machine_type(sku_id).gpus))
