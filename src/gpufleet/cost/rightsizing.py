"""Rightsizing: CPU, memory, GPU count and GPU SKU from usage percentiles with headroom, with the saving.

GPU compute need is measured in H100-equivalents (``relative_throughput``): a replica that keeps ``g`` GPUs of
SKU ``s`` busy ``u`` of the time needs ``u * g * tp(s) * (1 + headroom)``. A candidate SKU ``c`` must supply it
with ``ceil(need / tp(c))`` GPUs, and also hold the replica's GPU memory (``memory_gb``) with headroom, within one
node. GPU memory that was never measured (no sample of ``gpu_mem_gb``) is not taken as 0 GB: the candidate must then
hold at least the replica's current GPU memory (``gpus x memory_gb`` of its SKU), since nothing showed the model
fits in less (reason ``gpu_memory_unmeasured_kept``, evidence ``gpu_mem_floor_gb``). The cheapest candidate wins;
ties keep the current SKU. Recommendations go both ways (a starved CPU request is raised), and say why in reason
codes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import numpy.typing as npt

from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.reservations import term_seconds
from gpufleet.domain.skus import SKUS_BY_ID, GpuSku
from gpufleet.ports import PriceCatalog

HOURS_PER_MONTH = term_seconds(1) // 3600  # 730


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """What one replica requests."""

    cpu: float
    mem_gb: float
    gpus: int
    sku_id: str


@dataclass(frozen=True, slots=True)
class UsageProfile:
    """Per-replica usage samples over the look-back window (same length arrays; NaN = missing)."""

    cpu_cores: npt.NDArray[np.float64]
    mem_gb: npt.NDArray[np.float64]
    gpu_util: npt.NDArray[np.float64]  # 0..1, mean over the replica's GPUs
    gpu_mem_gb: npt.NDArray[np.float64]  # GPU memory used by the replica, summed over its GPUs


@dataclass(frozen=True, slots=True)
class RightsizingPolicy:
    """Percentiles: p95 for elastic resources (CPU, GPU compute), p99 for memory (running out kills the process).
    headroom 0.2: 20 % above the percentile for bursts. min_samples 288: one day of 5-minute samples.
    cpu_step/mem_step_gb: request granularity. min_saving_fraction: ignore SKU moves that save under 5 %.
    gpus_per_replica: the GPU counts a replica may have (a tensor-parallel degree must divide the model's attention
    heads: vLLM refuses 3 GPUs for 32 heads); None: the powers of two up to the SKU's ``gpus_per_node``. The
    replica's current count is always allowed (its model runs sharded that way)."""

    cpu_percentile: float = 95.0
    mem_percentile: float = 99.0
    gpu_percentile: float = 95.0
    headroom: float = 0.2
    min_samples: int = 288
    cpu_step: float = 0.5
    mem_step_gb: float = 1.0
    min_saving_fraction: float = 0.05
    gpus_per_replica: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        counts = self.gpus_per_replica
        if counts is not None and (
            not counts or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts)
        ):
            raise ValidationError("gpus_per_replica", f"must be positive whole GPU counts, got {counts!r}")


@dataclass(frozen=True, slots=True)
class Recommendation:
    workload_id: str
    replicas: int
    current: ResourceSpec
    recommended: ResourceSpec
    reasons: tuple[str, ...]
    current_usd_per_h: Decimal
    recommended_usd_per_h: Decimal
    evidence: Mapping[str, float] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.current != self.recommended

    @property
    def monthly_saving_usd(self) -> Decimal:
        return ((self.current_usd_per_h - self.recommended_usd_per_h) * HOURS_PER_MONTH).quantize(Decimal("0.01"))


def _pct(x: npt.NDArray[np.float64], q: float) -> float:
    ok = x[~np.isnan(x)]
    return float(np.percentile(ok, q)) if len(ok) else float("nan")


def _round_up(x: float, step: float) -> float:
    return max(step, math.ceil(x / step - 1e-9) * step)


def gpu_memory_percentile(gpu_mem_gb: npt.NDArray[np.float64], policy: RightsizingPolicy | None = None) -> float:
    """The percentile of one replica's measured GPU memory that rightsizing sizes to (``mem_percentile``, p99),
    NaN samples left out; NaN when none was measured."""
    return _pct(gpu_mem_gb, (policy or RightsizingPolicy()).mem_percentile)


def gpus_holding(need_gb: float, memory_gb: float) -> int:
    """The fewest GPUs of ``memory_gb`` each that hold ``need_gb`` of GPU memory (at least 1)."""
    return max(1, math.ceil(need_gb / memory_gb - 1e-9))


def gpu_memory_need_gb(gpu_mem_p_gb: float, policy: RightsizingPolicy | None = None) -> float:
    """The GPU memory a replica needs: its measured percentile (``gpu_memory_percentile``) with the headroom."""
    return gpu_mem_p_gb * (1.0 + (policy or RightsizingPolicy()).headroom)


def gpu_memory_floor(gpu_mem_p_gb: float, memory_gb: float, policy: RightsizingPolicy | None = None) -> int:
    """The GPU-memory floor: the GPUs of ``memory_gb`` each that hold ``gpu_mem_p_gb`` (a replica's measured GPU
    memory percentile) with the rightsizing headroom, the fewest ``recommend`` sizes a replica of that SKU to."""
    return gpus_holding(gpu_memory_need_gb(gpu_mem_p_gb, policy), memory_gb)


def allowed_gpu_counts(sku: GpuSku, current_gpus: int, policy: RightsizingPolicy | None = None) -> tuple[int, ...]:
    """The GPU counts, ascending, a replica may have on ``sku``: the policy's ``gpus_per_replica`` (default: powers
    of two) up to the SKU's ``gpus_per_node``, and the replica's current count."""
    counts = (policy or RightsizingPolicy()).gpus_per_replica
    if counts is None:
        counts = tuple(1 << k for k in range(sku.gpus_per_node.bit_length()))
    return tuple(sorted({n for n in counts if n <= sku.gpus_per_node} | {current_gpus}))


def bucket_gpu_memory(
    bucket: npt.NDArray[np.intp], gpus: npt.NDArray[np.float64], gpu_mem_gb: npt.NDArray[np.float64], n: int
) -> npt.NDArray[np.float64]:
    """One replica's GPU memory per bucket from a workload's records (``bucket[i]`` in ``range(n)`` is record i's
    bucket; one record per pool, tier or source the workload held GPUs in then): the largest of the bucket's records
    holding GPUs, NaN when one of them did not measure it (an unmeasured pool's replicas may hold more) or none holds
    GPUs."""
    held = gpus > 0
    lacking = held & np.isnan(gpu_mem_gb)
    ok = held & ~lacking
    mem = np.full(n, -np.inf)
    np.maximum.at(mem, bucket[ok], gpu_mem_gb[ok])
    unmeasured = (np.bincount(bucket[lacking], minlength=n) > 0) | np.isinf(mem)
    return np.where(unmeasured, np.nan, mem)


def recommend(
    workload_id: str,
    current: ResourceSpec,
    usage: UsageProfile,
    *,
    replicas: int = 1,
    candidate_skus: Sequence[str] | None = None,
    price_usd_per_gpu_h: Mapping[str, Decimal] | None = None,
    policy: RightsizingPolicy | None = None,
    catalog: PriceCatalog = BUILTIN_PRICE_CATALOG,
) -> Recommendation:
    """One recommendation per workload. ``candidate_skus`` are the SKUs it accepts (default: only its current SKU);
    prices default to the on-demand list prices of the injected ``catalog``."""
    pol = policy or RightsizingPolicy()
    listed = {k: p.on_demand for k in catalog.sku_ids() if (p := catalog.list_price(k)) is not None}
    prices = dict(price_usd_per_gpu_h) if price_usd_per_gpu_h else listed
    if current.sku_id not in SKUS_BY_ID or current.sku_id not in prices:
        raise ValidationError("sku_id", f"unknown or unpriced SKU {current.sku_id!r}")
    cur_cost = prices[current.sku_id] * current.gpus * replicas
    n_ok = int(np.sum(~np.isnan(usage.gpu_util)))
    if n_ok < pol.min_samples:
        return Recommendation(workload_id, replicas, current, current, ("insufficient_samples",), cur_cost, cur_cost,
                              {"samples": float(n_ok)})  # fmt: skip
    h = 1.0 + pol.headroom
    p_cpu = _pct(usage.cpu_cores, pol.cpu_percentile)
    p_mem = _pct(usage.mem_gb, pol.mem_percentile)
    p_util = min(1.0, max(0.0, _pct(usage.gpu_util, pol.gpu_percentile)))
    p_gmem = gpu_memory_percentile(usage.gpu_mem_gb, pol)
    reasons: list[str] = []

    cpu = current.cpu if math.isnan(p_cpu) else _round_up(p_cpu * h, pol.cpu_step)
    mem = current.mem_gb if math.isnan(p_mem) else _round_up(p_mem * h, pol.mem_step_gb)
    if cpu != current.cpu:
        reasons.append("cpu_reduced" if cpu < current.cpu else "cpu_raised_starved")
    if mem != current.mem_gb:
        reasons.append("memory_reduced" if mem < current.mem_gb else "memory_raised_near_limit")

    need_tp = p_util * current.gpus * SKUS_BY_ID[current.sku_id].relative_throughput * h
    mem_measured = not math.isnan(p_gmem)
    # unmeasured GPU memory: keep at least the replica's current GPU memory (no headroom: it ran in that)
    mem_floor = float(current.gpus * SKUS_BY_ID[current.sku_id].memory_gb)
    need_mem = gpu_memory_need_gb(p_gmem, pol) if mem_measured else mem_floor
    best_sku, best_gpus = current.sku_id, current.gpus
    best_cost = cur_cost
    needed: dict[str, int] = {}  # the GPUs each SKU needs, before rounding up to an allowed count
    for sku_id in dict.fromkeys([current.sku_id, *(candidate_skus or ())]):
        s = SKUS_BY_ID.get(sku_id)
        if s is None or sku_id not in prices:
            continue
        needed[sku_id] = max(math.ceil(need_tp / s.relative_throughput - 1e-9), gpus_holding(need_mem, s.memory_gb))
        gpus = next((n for n in allowed_gpu_counts(s, current.gpus, pol) if n >= needed[sku_id]), None)
        if gpus is None or gpus > s.gpus_per_node:
            continue
        cost = prices[sku_id] * gpus * replicas
        cheaper_enough = cost < cur_cost * Decimal(str(1 - pol.min_saving_fraction))
        fewer = sku_id == current.sku_id and gpus < current.gpus
        if (fewer or (sku_id != current.sku_id and cheaper_enough)) and cost < best_cost:
            best_sku, best_gpus, best_cost = sku_id, gpus, cost
    gpus_needed = needed.get(best_sku, best_gpus)
    if best_sku != current.sku_id:  # a memory fit is claimed only when GPU memory was measured
        reasons.append("cheaper_sku_fits_memory_and_throughput" if mem_measured else "cheaper_sku_keeps_gpu_memory")
    if best_gpus != current.gpus:
        reasons.append("gpu_count_reduced" if best_gpus < current.gpus else "gpu_count_raised_for_sku")
    if best_gpus > gpus_needed and best_gpus <= SKUS_BY_ID[best_sku].gpus_per_node:  # fewer would do, but a
        # replica cannot be sharded over them (a multi-node replica kept as it is was not rounded)
        reasons.append("gpu_count_rounded_up_for_parallelism")
    if not mem_measured:
        reasons.append("gpu_memory_unmeasured_kept")
    rec = ResourceSpec(cpu, mem, best_gpus, best_sku)
    evidence = {"cpu_p": p_cpu, "mem_p_gb": p_mem, "gpu_util_p": p_util, "gpu_mem_p_gb": p_gmem,
                "need_h100_eq": need_tp, "need_gpu_mem_gb": need_mem,
                "gpu_mem_floor_gb": math.nan if mem_measured else mem_floor, "gpus_needed": float(gpus_needed),
                "samples": float(n_ok)}  # fmt: skip
    return Recommendation(workload_id, replicas, current, rec, tuple(reasons) or ("already_right_sized",),
                          cur_cost, best_cost, evidence)  # fmt: skip
