"""Fragmentation-aware policies: FGD (the published reference) and ``gpufleet`` (ours).

Both score a node by how much placing the request changes the node's expected GPU fragment (see
:mod:`gpufleet.schedule.frag`). Scores are cached per (node, request shape) and recomputed only for nodes
whose ``version`` changed, so a decision costs O(changed nodes), not O(nodes x shapes).

``fgd`` replicates the artifact: the distribution is the trace's full pod list (FGD's typical pods, top 95%
of pods by shape), the score is ``int(sigmoid(delta/1000) * 100)``, ties are broken uniformly at random,
and a fractional pod takes the GPU slot with the best (integer) score, first index on ties.

``gpufleet`` differs in four ways, each a reason it packs better (ablations in docs/benchmarks/sched.md):
1. it learns the distribution ONLINE from the requests it has been asked to place (never the future),
   refreshing it on a doubling schedule, and keeps every shape seen (no 95% cut);
2. the distribution weighs shapes by their GPU demand (``num_gpu * gpu_milli``): the cost of a stranded
   GPU is paid in GPUs, so a shape's weight is the GPU demand that would be turned away by a fragment;
3. fit checks in the fragment include memory, which FGD ignores although the filter enforces it;
4. the score is the exact fragment delta (no sigmoid/integer rounding); ties go to the node left with the
   least free GPU (best fit), then least free CPU -- deterministic packing instead of a coin toss.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpufleet.schedule.frag import FragModel, WorkloadDistribution, after_states
from gpufleet.schedule.policies import best_fit_gpus, pick_max
from gpufleet.schedule.table import I64, MILLI, NodeTable, PodRequest

_ShapeKey = tuple[int, int, int, int, tuple[str, ...]]


class _CachedFragPolicy:
    name = "frag"
    rank: I64 | None = None

    def __init__(self, table: NodeTable, model: FragModel | None) -> None:
        self.model = model
        n = table.n_nodes
        self._shape_ids: dict[_ShapeKey, int] = {}
        self._cap = 64
        self._score = np.zeros((n, self._cap), dtype=np.float64)
        self._slot = np.full((n, self._cap), -1, dtype=np.int16)
        self._ver = np.full((n, self._cap), -1, dtype=np.int64)
        self._before = np.zeros(n, dtype=np.float64)
        self._before_ver = np.full(n, -1, dtype=np.int64)

    def observe(self, req: PodRequest) -> None:
        return None

    def set_model(self, model: FragModel) -> None:
        self.model = model
        self._ver[:] = -1
        self._before_ver[:] = -1

    def _sid(self, req: PodRequest) -> int:
        key = (req.cpu_milli, req.gpu_milli, req.num_gpu, req.memory_mib, req.gpu_models)
        sid = self._shape_ids.get(key)
        if sid is None:
            sid = len(self._shape_ids)
            self._shape_ids[key] = sid
            if sid >= self._cap:
                grow = self._cap
                n = self._score.shape[0]
                self._score = np.hstack([self._score, np.zeros((n, grow))])
                self._slot = np.hstack([self._slot, np.full((n, grow), -1, dtype=np.int16)])
                self._ver = np.hstack([self._ver, np.full((n, grow), -1, dtype=np.int64)])
                self._cap += grow
        return sid

    def _frag_before(self, table: NodeTable, nodes: I64) -> np.ndarray:
        assert self.model is not None
        stale = nodes[self._before_ver[nodes] != table.version[nodes]]
        if stale.size:
            self._before[stale] = self.model.amount(
                table.gpu_left_milli[stale], table.cpu_left_milli[stale], table.mem_left_mib[stale], stale
            )
            self._before_ver[stale] = table.version[stale]
        return self._before[nodes]

    def _evaluate(self, table: NodeTable, req: PodRequest, nodes: I64) -> tuple[np.ndarray, np.ndarray]:
        """Score (higher is better) and chosen GPU slot (or -1) per node."""
        assert self.model is not None
        before = self._frag_before(table, nodes)
        states, cpu, mem, of, slot, valid = after_states(table, nodes, req)
        after = self.model.amount(states, cpu, mem, of)
        per = len(after) // nodes.size
        score = self._option_score(np.repeat(before, per) - after, states, cpu, mem, table.gpu_left_milli.shape[1])
        score = np.where(valid, score, -np.inf).reshape(nodes.size, per)
        best = np.argmax(score, axis=1)  # first index among equal scores
        return score[np.arange(nodes.size), best], slot.reshape(nodes.size, per)[np.arange(nodes.size), best]

    def _option_score(self, delta: np.ndarray, states: np.ndarray, cpu: I64, mem: I64, g: int) -> np.ndarray:
        raise NotImplementedError

    def _pick(self, scores: np.ndarray, candidates: I64, table: NodeTable, rng: np.random.Generator) -> int:
        return pick_max(scores, candidates, self.rank, rng)

    def choose(
        self, table: NodeTable, req: PodRequest, candidates: I64, rng: np.random.Generator
    ) -> tuple[int, tuple[int, ...]]:
        sid = self._sid(req)
        stale = candidates[self._ver[candidates, sid] != table.version[candidates]]
        if stale.size:
            sc, sl = self._evaluate(table, req, stale)
            self._score[stale, sid] = sc
            self._slot[stale, sid] = sl
            self._ver[stale, sid] = table.version[stale]
        node = self._pick(self._score[candidates, sid], candidates, table, rng)
        if req.is_share:
            return node, (int(self._slot[node, sid]),)
        return node, best_fit_gpus(table, node, req)


class FgdPolicy(_CachedFragPolicy):
    """FGD as published: fixed distribution (the trace's typical pods), integer sigmoid score."""

    name = "fgd"

    def _option_score(self, delta: np.ndarray, states: np.ndarray, cpu: I64, mem: I64, g: int) -> np.ndarray:
        return np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))


class GpufleetPolicy(_CachedFragPolicy):
    """Ours: online GPU-demand-weighted distribution, memory-aware fragment, exact delta, best-fit ties."""

    name = "gpufleet"

    def __init__(
        self,
        table: NodeTable,
        *,
        weight_by_gpu: bool = False,
        use_memory: bool = True,
        exact: bool = True,
        tie_tolerance_milli: float = 0.0,
        include_cpu_shapes: bool = False,
        prefer_used: bool = False,
    ) -> None:
        super().__init__(table, None)
        self._table = table
        self.weight_by_gpu = weight_by_gpu
        self.use_memory = use_memory
        self.exact = exact
        self.tie_tolerance_milli = tie_tolerance_milli
        self.include_cpu_shapes = include_cpu_shapes
        self.prefer_used = prefer_used
        self._counts: Counter[_ShapeKey] = Counter()
        self._seen = 0
        self._next_refresh = 1

    def observe(self, req: PodRequest) -> None:
        if req.num_gpu == 0 and not self.include_cpu_shapes:
            return  # a CPU-only task cannot be blocked by GPU fragments
        w = req.total_gpu_milli / MILLI if self.weight_by_gpu else 1.0
        self._counts[(req.cpu_milli, req.gpu_milli, req.num_gpu, req.memory_mib if self.use_memory else 0,
                      req.gpu_models)] += w  # fmt: skip
        self._seen += 1
        if self._seen >= self._next_refresh:
            self._next_refresh = self._seen * 2
            dist = WorkloadDistribution.from_counts(dict(self._counts))
            self.set_model(
                FragModel.build(dist, self._table, use_memory=self.use_memory, include_cpu_shapes=self.include_cpu_shapes)
            )

    def choose(
        self, table: NodeTable, req: PodRequest, candidates: I64, rng: np.random.Generator
    ) -> tuple[int, tuple[int, ...]]:
        if self.model is None:  # nothing learned yet (a CPU-only first request): best fit on GPUs
            free = table.gpu_left_milli[candidates].sum(axis=1)
            node = int(candidates[int(np.argmin(free))])
            return node, best_fit_gpus(table, node, req)
        return super().choose(table, req, candidates, rng)

    def _option_score(self, delta: np.ndarray, states: np.ndarray, cpu: I64, mem: I64, g: int) -> np.ndarray:
        if not self.exact:
            return np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))
        # exact fragment delta (milli GPU); best-fit tie-break: fewer free GPU milli left, then less CPU left
        free_gpu = states.sum(axis=1).astype(np.float64)
        return np.round(delta, 6) - 1e-7 * free_gpu - 1e-13 * cpu

    def _pick(self, scores: np.ndarray, candidates: I64, table: NodeTable, rng: np.random.Generator) -> int:
        if not self.exact or self.tie_tolerance_milli > 0:
            tol = self.tie_tolerance_milli if self.exact else 0.0
            best = np.flatnonzero(scores >= scores.max() - tol)
            if self.prefer_used and best.size > 1:
                c = candidates[best]
                used = (table.gpu_left_milli[c].sum(axis=1) < table.gpu_count[c].astype(np.int64) * MILLI) | (
                    table.cpu_left_milli[c] < table.cpu_cap_milli[c]
                )
                if used.any():
                    best = best[used]
            if self.rank is not None:
                return int(candidates[best[np.argmin(self.rank[candidates[best]])]])
            return int(candidates[best[0]])
        return int(candidates[int(np.argmax(scores))])
