"""GPU SKUs: what a GPU type is, independent of who sells it."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.domain.errors import NotFoundError


@dataclass(frozen=True, slots=True)
class GpuSku:
    """A GPU type as sold in whole nodes.

    ``relative_throughput`` is serving/training throughput relative to an H100 80GB (=1.0), used by
    capacity models and rightsizing; the figures are coarse public ratios, see docs/catalog.md.
    """

    id: str
    name: str
    memory_gb: int
    gpus_per_node: int
    cpu_per_node: int
    mem_gb_per_node: int
    interconnect: str
    relative_throughput: float


BUILTIN_SKUS: tuple[GpuSku, ...] = (
    GpuSku("b200", "NVIDIA B200 180GB", 180, 8, 192, 2048, "nvlink5", 2.2),
    GpuSku("h200_141gb", "NVIDIA H200 141GB", 141, 8, 192, 2048, "nvlink4", 1.3),
    GpuSku("h100_80gb", "NVIDIA H100 80GB SXM", 80, 8, 192, 2048, "nvlink4", 1.0),
    GpuSku("a100_80gb", "NVIDIA A100 80GB SXM", 80, 8, 96, 1152, "nvlink3", 0.45),
    GpuSku("l40s", "NVIDIA L40S 48GB", 48, 8, 192, 1536, "pcie4", 0.35),
    GpuSku("l4", "NVIDIA L4 24GB", 24, 8, 192, 768, "pcie4", 0.12),
)

SKUS_BY_ID: dict[str, GpuSku] = {s.id: s for s in BUILTIN_SKUS}


def sku(sku_id: str) -> GpuSku:
    try:
        return SKUS_BY_ID[sku_id]
    except KeyError:
        raise NotFoundError("sku", sku_id) from None
