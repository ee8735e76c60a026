"""GPU fragmentation given a workload distribution (FGD, Weng et al., USENIX ATC'23), vectorized.

For a node state and one task shape ``m`` of the target workload, the node's GPU fragment ``F_n(m)`` is:
- all unallocated GPU milli of the node if ``m`` cannot run there at all (wrong GPU model, too few GPUs
  with ``>= m.gpu_milli`` left, or too little CPU; or, in the memory-aware variant, too little memory);
  CPU-only shapes count as "cannot use GPUs", i.e. all unallocated GPU milli (FGD's XL/XR quadrants);
- otherwise the milli left on GPUs that individually have less than ``m.gpu_milli`` left.
The expected fragment is ``sum_m p_m F_n(m)``. FGD places a task where it increases that the least.

``model_access="neutral"`` (gpufleet) weighs, on each node, only the shapes whose GPU-model constraint allows
the node's model; FGD (``"fragment"``) counts a GPU that a shape may not use as fragmented for that shape.
Under FGD's reading, consuming a GPU of a model that many pinned shapes exclude "removes fragment", so
unconstrained pods are pulled onto the scarce models that their own pinned pods need (on the default pod
list with a third of GPU pods pinned to one model, FGD left 6.5 % unallocated and gpufleet with FGD's
reading 6.8 %; see docs/benchmarks/sched.md, "GPU-type constraints"). With no constraints the two agree.

``capacity="ratio"`` (gpufleet) adds the GPU milli that the fragment calls usable but that the node's CPU
(and memory) cannot feed at the workload's average CPU-per-GPU (memory-per-GPU) ratio:
``p_gpu * max(0, usable - cpu_left / cpu_per_gpu_milli)``. FGD asks only whether ONE more task fits, so
a node with 6 idle GPUs and CPU for one more task looks unfragmented to it; here 5 of those GPUs count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.schedule.table import BOOL, I32, I64, NodeTable, PodRequest

F64 = npt.NDArray[np.float64]
ShapeKey = tuple[int, int, int, tuple[str, ...]]  # cpu_milli, gpu_milli, num_gpu, gpu_models


@dataclass(frozen=True, slots=True)
class WorkloadDistribution:
    """Task shapes and their probabilities. ``mem_mib`` is used only by the memory-aware variant."""

    cpu_milli: I64
    gpu_milli: I64
    num_gpu: I64
    mem_mib: I64
    gpu_models: tuple[tuple[str, ...], ...]
    prob: F64

    @property
    def n_shapes(self) -> int:
        return len(self.prob)

    @classmethod
    def from_counts(cls, counts: dict[tuple[int, int, int, int, tuple[str, ...]], float]) -> WorkloadDistribution:
        """Keys are (cpu_milli, gpu_milli, num_gpu, mem_mib, gpu_models); values are weights (any scale)."""
        keys = list(counts)
        w = np.array([counts[k] for k in keys], dtype=np.float64)
        return cls(
            cpu_milli=np.array([k[0] for k in keys], dtype=np.int64),
            gpu_milli=np.array([k[1] for k in keys], dtype=np.int64),
            num_gpu=np.array([k[2] for k in keys], dtype=np.int64),
            mem_mib=np.array([k[3] for k in keys], dtype=np.int64),
            gpu_models=tuple(k[4] for k in keys),
            prob=w / w.sum(),
        )


def fgd_typical_pods(
    pods: Iterable[PodRequest], popularity_threshold_pct: float = 95.0, increase_step: int = 1
) -> WorkloadDistribution:
    """FGD's ``GetTypicalPods``: count pods per (cpu, gpu_milli, num_gpu, gpu_models) -- memory is not
    part of the key -- sort by count descending (ties: larger cpu, gpu_milli, num_gpu, models first),
    keep the most popular shapes until they cover ``popularity_threshold_pct`` of pods, renormalize.
    CPU-only pods are included (``isInvolvedCpuPods: true`` in the paper's runs)."""
    cnt: Counter[ShapeKey] = Counter()
    for p in pods:
        # kube-scheduler's GetNonzeroRequests: a pod with no CPU request counts as 100m
        cnt[(p.cpu_milli or 100, p.gpu_milli, p.num_gpu, tuple(sorted(p.gpu_models)))] += 1
    total = float(sum(cnt.values()))
    ordered = sorted(cnt.items(), key=lambda kv: (kv[1], kv[0][0], kv[0][1], kv[0][2], "|".join(kv[0][3])))
    ordered.reverse()
    expected = popularity_threshold_pct * total / 100.0
    kept: list[tuple[ShapeKey, int]] = []
    cum = 0.0
    i = 0
    while cum < expected and i < len(ordered):
        stop = min(len(ordered), len(kept) + increase_step)
        while i < stop:
            kept.append(ordered[i])
            cum += ordered[i][1]
            i += 1
    return WorkloadDistribution.from_counts({(k[0], k[1], k[2], 0, k[3]): float(c) for k, c in kept})


@dataclass(slots=True)
class FragModel:
    """A distribution bound to a node table: per-shape access masks and distinct GPU-milli levels."""

    dist: WorkloadDistribution
    use_memory: bool
    include_cpu_shapes: bool
    capacity: str  # "none" (FGD) | "ratio" (add GPU the node's CPU/memory cannot feed)
    model_access: str  # "fragment" (FGD) | "neutral" (shapes barred from a node's model do not weigh there)
    levels: I64  # distinct gpu_milli of GPU shapes
    t_level: I64  # index into levels per GPU shape
    t_num: I64
    t_cpu: I64
    t_mem: I64
    t_prob: F64
    p_cpu_shapes: float
    access: BOOL  # (N, T_gpu)
    node_share: F64  # (N,) probability of the GPU shapes allowed on each node
    every_node_allowed: bool  # no shape's GPU-model constraint bars any GPU node
    cpu_per_milli: float  # workload's CPU milli per GPU milli (GPU shapes, probability weighted)
    mem_per_milli: float

    @classmethod
    def build(
        cls,
        dist: WorkloadDistribution,
        table: NodeTable,
        *,
        use_memory: bool = False,
        include_cpu_shapes: bool = True,
        capacity: str = "none",
        model_access: str = "fragment",
    ) -> FragModel:
        gpu = dist.gpu_milli > 0
        idx = np.flatnonzero(gpu)
        levels = np.unique(dist.gpu_milli[idx]) if idx.size else np.array([1000], dtype=np.int64)
        access = np.ones((table.n_nodes, idx.size), dtype=bool)
        for j, t in enumerate(idx):
            access[:, j] = table.model_ok(dist.gpu_models[t]) & (table.gpu_count > 0)
        return cls(
            dist=dist,
            use_memory=use_memory,
            include_cpu_shapes=include_cpu_shapes,
            capacity=capacity,
            model_access=model_access,
            levels=levels.astype(np.int64),
            t_level=np.searchsorted(levels, dist.gpu_milli[idx]).astype(np.int64),
            t_num=dist.num_gpu[idx],
            t_cpu=dist.cpu_milli[idx],
            t_mem=dist.mem_mib[idx],
            t_prob=dist.prob[idx],
            p_cpu_shapes=float(dist.prob[~gpu].sum()) if include_cpu_shapes else 0.0,
            access=access,
            node_share=access @ dist.prob[idx],
            every_node_allowed=bool(access[table.gpu_count > 0].all()),
            cpu_per_milli=_ratio(dist, idx, dist.cpu_milli),
            mem_per_milli=_ratio(dist, idx, dist.mem_mib),
        )

    def amount(self, gpu_left: I32 | I64, cpu_left: I64, mem_left: I64, nodes: I64) -> F64:
        """Expected GPU fragment (milli) of K node states. ``nodes`` gives each state's node (for access)."""
        total = gpu_left.sum(axis=1).astype(np.float64)
        if self.t_prob.size == 0:
            only_cpu: F64 = total * self.p_cpu_shapes
            return only_cpu
        ge = gpu_left[:, :, None] >= self.levels[None, None, :]  # (K, G, L)
        cnt = ge.sum(axis=1)  # (K, L)
        small = np.where(ge, 0, gpu_left[:, :, None]).sum(axis=1).astype(np.float64)  # (K, L)
        ok = cnt[:, self.t_level] >= self.t_num[None, :]
        ok &= cpu_left[:, None] >= self.t_cpu[None, :]
        if self.use_memory:
            ok &= mem_left[:, None] >= self.t_mem[None, :]
        gpu_share: F64 | float = float(self.t_prob.sum())
        if self.model_access == "neutral" and not self.every_node_allowed:
            frag = np.where(ok, small[:, self.t_level], total[:, None])
            frag = np.where(self.access[nodes], frag, 0.0)  # a shape barred from the node's model: no weight
            gpu_share = self.node_share[nodes]
        else:  # FGD: a GPU a shape may not use is that shape's fragment (the same as neutral when all may)
            ok &= self.access[nodes]  # in place: ``frag`` keeps its memory order, so sums stay bit-identical
            frag = np.where(ok, small[:, self.t_level], total[:, None])
        gpu_frag = frag @ self.t_prob
        out: F64 = gpu_frag + total * self.p_cpu_shapes
        if self.capacity == "ratio":
            # GPU the fragment calls usable but the node's CPU / memory cannot feed at the workload's
            # average CPU-per-GPU and memory-per-GPU ratios (over the shapes that weigh on the node)
            expected = gpu_frag / np.maximum(gpu_share, 1e-12)
            usable = total - expected
            feedable = cpu_left / self.cpu_per_milli
            if self.use_memory:
                feedable = np.minimum(feedable, mem_left / self.mem_per_milli)
            out = out + gpu_share * np.maximum(0.0, usable - feedable)
        return out


def _ratio(dist: WorkloadDistribution, idx: I64, what: I64) -> float:
    size = (dist.num_gpu[idx] * dist.gpu_milli[idx]).astype(np.float64)
    denom = float(dist.prob[idx] @ size)
    return max(1e-9, float(dist.prob[idx] @ what[idx].astype(np.float64)) / denom) if denom > 0 else 1e-9


def after_states(table: NodeTable, nodes: I64, req: PodRequest) -> tuple[I32, I64, I64, I64, I64, BOOL]:
    """Candidate states after placing ``req`` on each of ``nodes``.

    Fractional requests branch over every GPU slot (``K = len(nodes) * G`` states, ``valid`` marks slots
    with enough milli left); whole-GPU requests take the lowest-index fully free GPUs (one state per node).
    Returns (gpu_left, cpu_left, mem_left, node_of_state, gpu_slot_or_-1, valid).
    """
    gl = table.gpu_left_milli[nodes]
    cpu = table.cpu_left_milli[nodes] - req.cpu_milli
    mem = table.mem_left_mib[nodes] - req.memory_mib
    g = gl.shape[1]
    if req.is_share:
        k = nodes.size
        cube = np.repeat(gl, g, axis=0).reshape(k, g, g)
        eye = np.eye(g, dtype=np.int32)[None, :, :] * req.gpu_milli
        states: I32 = (cube - eye).reshape(k * g, g).astype(np.int32)
        slot = np.tile(np.arange(g, dtype=np.int64), k)
        # one option per distinct amount left on a node: equal GPUs give equal fragments (first slot wins)
        dup = (gl[:, :, None] == gl[:, None, :]) & np.tri(g, g, -1, dtype=bool).T[None, :, :]
        valid = ((gl >= req.gpu_milli) & ~dup.any(axis=1)).reshape(-1)
        rep = np.repeat(np.arange(k), g)
        return states, cpu[rep], mem[rep], nodes[rep], slot, valid
    states = gl.copy()
    if req.num_gpu > 0:
        free = gl >= req.gpu_milli
        take = free & (np.cumsum(free, axis=1) <= req.num_gpu)
        states = states - take.astype(np.int32) * req.gpu_milli
    return states, cpu, mem, nodes, np.full(nodes.size, -1, dtype=np.int64), np.ones(nodes.size, dtype=bool)
