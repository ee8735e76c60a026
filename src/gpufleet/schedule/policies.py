"""Placement policies: classic baselines (as in the FGD artifact) and the fragmentation-aware ones.

Every policy answers ``choose(table, req, candidates, rng) -> (node, gpu_slots)`` for a request that fits
on every node in ``candidates`` (already filtered). Baselines replicate the scoring of the FGD artifact
(hkust-adsl/kubernetes-scheduler-simulator): integer kube-scheduler scores in [0, 100], ties broken
uniformly at random, GPU slot chosen best-fit (least milli left that still fits; first index on ties).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from gpufleet.schedule.table import I64, MILLI, NodeTable, PodRequest, tag_of

MAX_SPEC_CPU_MILLI = 128_000  # the artifact's normalisers (MaxSpecCpu, MaxSpecGpu)
MAX_SPEC_GPU_MILLI = 8_000


class Policy(Protocol):
    name: str

    def observe(self, req: PodRequest) -> None:
        """Told about every arriving request before it is placed (online learning hook)."""

    def choose(
        self, table: NodeTable, req: PodRequest, candidates: I64, rng: np.random.Generator
    ) -> tuple[int, tuple[int, ...]]:
        """Pick a node among ``candidates`` (non-empty, all feasible) and the GPU slots to use."""
        ...


def best_fit_gpus(table: NodeTable, node: int, req: PodRequest) -> tuple[int, ...]:
    """GPU slots for ``req`` on ``node``: best-fit GPU for a share; lowest-index free GPUs otherwise."""
    if req.num_gpu == 0:
        return ()
    left = table.gpu_left_milli[node]
    if req.is_share:
        masked = np.where(left >= req.gpu_milli, left, MILLI + 1)
        return (int(np.argmin(masked)),)
    free = np.flatnonzero(left >= req.gpu_milli)
    return tuple(int(g) for g in free[: req.num_gpu])


def pick_max(scores: np.ndarray, candidates: I64, rank: I64 | None, rng: np.random.Generator) -> int:
    """Highest score; ties go to the lowest ``rank`` (a per-run node order), or uniformly at random."""
    best = np.flatnonzero(scores == scores.max())
    if best.size == 1:
        return int(candidates[best[0]])
    if rank is not None:
        return int(candidates[best[np.argmin(rank[candidates[best]])]])
    return int(candidates[best[rng.integers(best.size)]])


class _Base:
    name = "base"
    rank: I64 | None = None  # tie-break order over nodes; None = uniformly random ties

    def observe(self, req: PodRequest) -> None:
        return None

    def score(self, table: NodeTable, req: PodRequest, c: I64) -> np.ndarray:
        raise NotImplementedError

    def choose(
        self, table: NodeTable, req: PodRequest, candidates: I64, rng: np.random.Generator
    ) -> tuple[int, tuple[int, ...]]:
        node = pick_max(self.score(table, req, candidates), candidates, self.rank, rng)
        return node, best_fit_gpus(table, node, req)


class RandomPolicy(_Base):
    """A uniformly random feasible node (the artifact's RandomScore pre-score)."""

    name = "random"

    def choose(
        self, table: NodeTable, req: PodRequest, candidates: I64, rng: np.random.Generator
    ) -> tuple[int, tuple[int, ...]]:
        node = int(candidates[rng.integers(candidates.size)])
        if req.is_share:  # the artifact runs Random with gpuSelMethod=random
            fits = np.flatnonzero(table.gpu_left_milli[node] >= req.gpu_milli)
            return node, (int(fits[rng.integers(fits.size)]),)
        return node, best_fit_gpus(table, node, req)


class DotProdPolicy(_Base):
    """Tetris dot product of free (CPU, total GPU) and request, normalised by max spec; lower is better."""

    name = "dotprod"

    def score(self, table: NodeTable, req: PodRequest, c: I64) -> np.ndarray:
        cpu = table.cpu_left_milli[c] / MAX_SPEC_CPU_MILLI * (req.cpu_milli / MAX_SPEC_CPU_MILLI)
        gpu = table.gpu_left_milli[c].sum(axis=1) / MAX_SPEC_GPU_MILLI * (req.total_gpu_milli / MAX_SPEC_GPU_MILLI)
        out: I64 = np.floor(100.0 * (1.0 - (cpu + gpu) / 2.0)).astype(np.int64)
        return out


class BestFitPolicy(_Base):
    """Least weighted leftover (CPU, GPU) after placement, min-max normalised to [0, 100] (integer)."""

    name = "bestfit"

    def score(self, table: NodeTable, req: PodRequest, c: I64) -> np.ndarray:
        free_cpu = (table.cpu_left_milli[c] - req.cpu_milli) / MAX_SPEC_CPU_MILLI
        free_gpu = (table.gpu_left_milli[c].sum(axis=1) - req.total_gpu_milli) / MAX_SPEC_GPU_MILLI
        raw = np.trunc((1.0 - 0.5 * free_cpu - 0.5 * free_gpu) * 100.0).astype(np.int64)
        lo, hi = int(raw.min()), int(raw.max())
        if hi == lo:
            return np.zeros_like(raw)
        out: I64 = (raw - lo) * 100 // (hi - lo)
        return out


class PackingPolicy(_Base):
    """GPU packing: prefer used GPUs, then free GPUs on used nodes, then idle nodes (artifact's tiers)."""

    name = "packing"

    def score(self, table: NodeTable, req: PodRequest, c: I64) -> np.ndarray:
        if req.num_gpu == 0:
            return np.zeros(c.size, dtype=np.int64)
        left = table.gpu_left_milli[c]
        n_gpu = table.gpu_count[c].astype(np.int64)
        fully_free = (left == MILLI).sum(axis=1)
        if req.is_share:
            best = np.where(left >= req.gpu_milli, left, MILLI + 1).min(axis=1).astype(np.int64)
            shared = np.maximum(100 - (best * 100 // MILLI) // 10, 50)
            used = np.where(best == MILLI, max(50 - 1, 33), shared)
        else:
            used = np.full(c.size, max(50 - req.num_gpu, 33), dtype=np.int64)
        idle = fully_free == n_gpu
        out = np.where(idle, np.maximum(33 - fully_free, fully_free), used).astype(np.int64)
        return out


class ClusteringPolicy(_Base):
    """GPU clustering: co-locate pods of the same GPU-request kind; fuller nodes first within a tier."""

    name = "clustering"

    def score(self, table: NodeTable, req: PodRequest, c: I64) -> np.ndarray:
        if req.num_gpu == 0:
            return np.zeros(c.size, dtype=np.int64)
        tags = table.tag_counts[c]
        same = tags[:, tag_of(req)] > 0
        kinds = (tags > 0).sum(axis=1)
        fill = 25 * (MAX_SPEC_GPU_MILLI - table.gpu_left_milli[c].sum(axis=1).astype(np.int64)) // MAX_SPEC_GPU_MILLI
        base = np.where(same, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
        out: I64 = (fill + base).astype(np.int64)
        return out


BASELINES: dict[str, type[_Base]] = {
    "random": RandomPolicy,
    "dotprod": DotProdPolicy,
    "bestfit": BestFitPolicy,
    "packing": PackingPolicy,
    "clustering": ClusteringPolicy,
}
