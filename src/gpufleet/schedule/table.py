"""The node table: one row per node, numpy columns, the state every placement policy reads.

Invariants (checked by :meth:`NodeTable.check_invariants`, guarded by property tests):
``0 <= cpu_left_milli <= cpu_cap_milli``, ``0 <= mem_left_mib <= mem_cap_mib``,
``0 <= gpu_left_milli[n, g] <= 1000`` for real GPUs and ``== 0`` for padding slots ``g >= gpu_count[n]``.
A fractional request (``gpu_milli < 1000``) takes part of ONE GPU; a whole-GPU request takes ``num_gpu``
fully free GPUs on one node. Topology (rack, NVLink domain) is data: two int columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError

MILLI = 1000
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
BOOL = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node as configured: capacities, GPU model and where it sits in the topology."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_model: str = ""
    rack: int = 0
    nvlink_domain: int = 0
    labels: tuple[str, ...] = ()  # e.g. ("zone=a", "nic=rdma"): what a pod's node selector matches
    taints: tuple[str, ...] = ()  # a pod must tolerate every taint of a node to land on it (NoSchedule)


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks for. ``gpu_milli`` is per GPU (1..1000); ``gpu_models`` empty = any model.

    ``num_gpu == 1`` with ``gpu_milli < 1000`` is a fractional share of one GPU; ``num_gpu > 1`` needs
    ``gpu_milli == 1000`` (whole GPUs on one node).
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()
    node_selector: tuple[str, ...] = ()  # labels the node must carry
    tolerations: tuple[str, ...] = ()  # taints the pod accepts

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def is_share(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < MILLI

    def validate(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValidationError(f"pods[{self.name}].cpu_milli", "must be >= 0")
        if self.num_gpu < 0 or not 0 <= self.gpu_milli <= MILLI:
            raise ValidationError(f"pods[{self.name}].gpu_milli", "num_gpu >= 0 and 0 <= gpu_milli <= 1000")
        if self.num_gpu > 1 and self.gpu_milli != MILLI:
            raise ValidationError(f"pods[{self.name}].gpu_milli", "multi-GPU pods take whole GPUs (1000)")
        if (self.num_gpu == 0) != (self.gpu_milli == 0):
            raise ValidationError(f"pods[{self.name}].num_gpu", "num_gpu and gpu_milli must be both zero or both set")


@dataclass(slots=True)
class NodeTable:
    """Columns over nodes. Mutate only through :meth:`allocate` / :meth:`release` (they bump ``version``)."""

    names: list[str]
    models: tuple[str, ...]
    cpu_cap_milli: I64
    mem_cap_mib: I64
    gpu_count: I32
    gpu_model: I32  # index into ``models``; -1 = no GPU
    rack: I32
    nvlink_domain: I32
    cpu_left_milli: I64
    mem_left_mib: I64
    gpu_left_milli: I32  # (N, G)
    version: I64
    tag_counts: I32  # (N, 10): pods per clustering tag (0 = fractional, k = k whole GPUs, 9 = other)
    max_left_milli: I32  # derived: most milli left on any one GPU of the node
    free_gpus: I32  # derived: GPUs with all 1000 milli left
    # derived: hash of (sorted gpu_left row, cpu_left, mem_left, model); equal states score equal. A 64-bit
    # collision could only mis-rank a node, never place over capacity (feasibility never reads it).
    state_hash: I64
    label_bits: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # one bit per label
    taint_bits: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    bit_of: dict[str, int] = field(default_factory=dict)  # label or taint -> bit
    _spec_cache: dict[tuple[str, ...], BOOL] = field(default_factory=dict)

    @classmethod
    def from_specs(cls, specs: Sequence[NodeSpec]) -> NodeTable:
        if not specs:
            raise ValidationError("nodes", "at least one node is required")
        models = tuple(sorted({s.gpu_model for s in specs if s.gpu_model}))
        midx = {m: i for i, m in enumerate(models)}
        g_max = max([1, *(s.gpu_count for s in specs)])
        n = len(specs)
        gpu_count = np.array([s.gpu_count for s in specs], dtype=np.int32)
        gpu_left = np.zeros((n, g_max), dtype=np.int32)
        gpu_left[np.arange(g_max)[None, :] < gpu_count[:, None]] = MILLI
        cpu = np.array([s.cpu_milli for s in specs], dtype=np.int64)
        mem = np.array([s.memory_mib for s in specs], dtype=np.int64)
        words = sorted({w for s in specs for w in (*s.labels, *s.taints)})
        if len(words) > 62:
            raise ValidationError("nodes.labels", "at most 62 distinct labels and taints")
        bit_of = {w: 1 << i for i, w in enumerate(words)}
        label_bits = np.array([sum(bit_of[w] for w in set(s.labels)) for s in specs], dtype=np.int64)
        taint_bits = np.array([sum(bit_of[w] for w in set(s.taints)) for s in specs], dtype=np.int64)
        return cls(
            names=[s.name for s in specs],
            models=models,
            cpu_cap_milli=cpu,
            mem_cap_mib=mem,
            gpu_count=gpu_count,
            gpu_model=np.array([midx[s.gpu_model] if s.gpu_model else -1 for s in specs], dtype=np.int32),
            rack=np.array([s.rack for s in specs], dtype=np.int32),
            nvlink_domain=np.array([s.nvlink_domain for s in specs], dtype=np.int32),
            cpu_left_milli=cpu.copy(),
            mem_left_mib=mem.copy(),
            gpu_left_milli=gpu_left,
            version=np.zeros(n, dtype=np.int64),
            tag_counts=np.zeros((n, 10), dtype=np.int32),
            max_left_milli=gpu_left.max(axis=1).astype(np.int32),
            free_gpus=(gpu_left == MILLI).sum(axis=1).astype(np.int32),
            state_hash=np.zeros(n, dtype=np.int64),
            label_bits=label_bits,
            taint_bits=taint_bits,
            bit_of=bit_of,
        )._rehash_all()

    def _rehash_all(self) -> NodeTable:
        for i in range(self.n_nodes):
            self._rehash(i)
        return self

    def _rehash(self, node: int) -> None:
        row = self.gpu_left_milli[node]
        self.max_left_milli[node] = row.max()
        self.free_gpus[node] = int((row == MILLI).sum())
        sorted_row = tuple(sorted(row.tolist()))  # GPU order does not change any score
        key = (sorted_row, int(self.cpu_left_milli[node]), int(self.mem_left_mib[node]), int(self.gpu_model[node]))
        self.state_hash[node] = hash(key)

    @property
    def n_nodes(self) -> int:
        return len(self.names)

    @property
    def gpu_capacity_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI

    def allocated_gpu_milli(self) -> int:
        return self.gpu_capacity_milli - int(self.gpu_left_milli.sum())

    def model_ok(self, gpu_models: tuple[str, ...]) -> BOOL:
        """Nodes whose GPU model is allowed (``()`` = any node). Cached per distinct constraint."""
        got = self._spec_cache.get(gpu_models)
        if got is None:
            allowed = [i for i, m in enumerate(self.models) if m in gpu_models]
            got = np.ones(self.n_nodes, dtype=bool) if not gpu_models else np.isin(self.gpu_model, allowed)
            self._spec_cache[gpu_models] = got
        return got

    def feasible(self, req: PodRequest) -> BOOL:
        """Nodes where ``req`` fits now: CPU, memory, GPU count/share and GPU model."""
        ok = (self.cpu_left_milli >= req.cpu_milli) & (self.mem_left_mib >= req.memory_mib)
        if req.num_gpu == 1:
            ok &= self.max_left_milli >= req.gpu_milli
        elif req.num_gpu > 1:  # whole GPUs (validated: gpu_milli == 1000)
            ok &= self.free_gpus >= req.num_gpu
        if req.num_gpu > 0 and req.gpu_models:
            ok &= self.model_ok(req.gpu_models)
        if req.node_selector or self.taint_bits.any():
            ok &= self.placement_ok(req)
        return ok

    def placement_ok(self, req: PodRequest) -> BOOL:
        """Nodes whose labels satisfy the pod's node selector and whose taints the pod tolerates."""
        if any(w not in self.bit_of for w in req.node_selector):
            return np.zeros(self.n_nodes, dtype=bool)
        need = sum(self.bit_of[w] for w in set(req.node_selector))
        tol = sum(self.bit_of[w] for w in set(req.tolerations) if w in self.bit_of)
        ok: BOOL = ((self.label_bits & need) == need) & ((self.taint_bits & ~np.int64(tol)) == 0)
        return ok

    def infeasible_reason(self, req: PodRequest) -> str:
        """Why nothing fits, as a reason code (the first filter that empties the candidate set)."""
        if not self.placement_ok(req).any():
            return "no_node_matches_selector_or_tolerations"
        if req.num_gpu > 0:
            ok = self.model_ok(req.gpu_models) & (self.gpu_count >= req.num_gpu)
            if not ok.any():
                return "no_node_with_gpu_model_and_count"
            ok = ok & ((self.gpu_left_milli >= req.gpu_milli).sum(axis=1) >= req.num_gpu)
            if not ok.any():
                return "insufficient_gpu"
        else:
            ok = np.ones(self.n_nodes, dtype=bool)
        ok = ok & (self.cpu_left_milli >= req.cpu_milli)
        if not ok.any():
            return "insufficient_cpu"
        return "insufficient_memory"

    def allocate(self, node: int, req: PodRequest, gpus: tuple[int, ...]) -> None:
        """Commit ``req`` on ``node`` using GPU slots ``gpus``. Raises if it would go over capacity."""
        if self.cpu_left_milli[node] < req.cpu_milli or self.mem_left_mib[node] < req.memory_mib:
            raise ValidationError("allocate", f"{req.name} does not fit CPU/memory on {self.names[node]}")
        if len(gpus) != req.num_gpu or len(set(gpus)) != len(gpus):
            raise ValidationError("allocate", f"{req.name}: {len(gpus)} GPU slots for {req.num_gpu} GPUs")
        for g in gpus:
            if g >= self.gpu_count[node] or self.gpu_left_milli[node, g] < req.gpu_milli:
                raise ValidationError("allocate", f"{req.name}: GPU {g} on {self.names[node]} lacks capacity")
        self.cpu_left_milli[node] -= req.cpu_milli
        self.mem_left_mib[node] -= req.memory_mib
        for g in gpus:
            self.gpu_left_milli[node, g] -= req.gpu_milli
        if req.num_gpu > 0:
            self.tag_counts[node, tag_of(req)] += 1
        self.version[node] += 1
        self._rehash(node)

    def release(self, node: int, req: PodRequest, gpus: tuple[int, ...]) -> None:
        """Give back what :meth:`allocate` took (the caller guarantees it was allocated)."""
        self.cpu_left_milli[node] += req.cpu_milli
        self.mem_left_mib[node] += req.memory_mib
        for g in gpus:
            self.gpu_left_milli[node, g] += req.gpu_milli
        if req.num_gpu > 0:
            self.tag_counts[node, tag_of(req)] -= 1
        self.version[node] += 1
        self._rehash(node)

    def check_invariants(self) -> None:
        """Raise AssertionError if any node is over capacity or a padding slot holds GPU capacity."""
        assert (self.cpu_left_milli >= 0).all() and (self.cpu_left_milli <= self.cpu_cap_milli).all()
        assert (self.mem_left_mib >= 0).all() and (self.mem_left_mib <= self.mem_cap_mib).all()
        assert (self.gpu_left_milli >= 0).all() and (self.gpu_left_milli <= MILLI).all()
        pad = np.arange(self.gpu_left_milli.shape[1])[None, :] >= self.gpu_count[:, None]
        assert (self.gpu_left_milli[pad] == 0).all()
        assert (self.max_left_milli == self.gpu_left_milli.max(axis=1)).all()
        assert (self.free_gpus == (self.gpu_left_milli == MILLI).sum(axis=1)).all()


def tag_of(req: PodRequest) -> int:
    """Clustering tag: 0 for a fractional GPU, k for k whole GPUs (k <= 8), 9 otherwise."""
    if req.is_share:
        return 0
    return req.num_gpu if req.num_gpu <= 8 else 9
