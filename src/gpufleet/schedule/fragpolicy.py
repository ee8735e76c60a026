"""Fragmentation-aware policies: FGD (the published reference) and ``gpufleet`` (ours).

Both score a node by how much placing the request changes the node's expected GPU fragment (see
:mod:`gpufleet.schedule.frag`). Scores are cached per (node, request shape) and recomputed only for nodes
whose ``version`` changed, so a decision costs O(changed nodes), not O(nodes x shapes).

``fgd`` replicates the artifact: the distribution is the trace's full pod list (FGD's typical pods, top
95% of pods by shape), the score is ``int(sigmoid(delta/1000) * 100)``, ties go to the earliest node in
a per-run random node order (``rank``: the artifact renames nodes with a seeded random prefix and its
scheduler fork takes the first best node; uniform random ties reproduce FGD badly, see docs), and a
fractional pod takes the GPU slot with the best (integer) score, first index on ties.

``gpufleet`` keeps FGD's score form and tie order and changes what the fragment knows:
1. it learns the distribution ONLINE from the requests it has been asked to place (never the future),
   rebuilt on a doubling schedule (1, 2, 4, ... requests) and, after 1,024, only on real drift;
2. fit checks in the fragment include memory, which FGD ignores although the filter enforces it;
3. the fragment adds GPUs the node's CPU/memory cannot feed at the workload's CPU-per-GPU ratio
   (``capacity="ratio"`` in :mod:`gpufleet.schedule.frag`): FGD only asks whether ONE more task fits;
4. a shape pinned to other GPU models does not weigh on a node (``model_access="neutral"``): FGD counts
   that node's free GPUs as that shape's fragment, which draws unconstrained pods onto scarce models.
Measured ablations (online FGD without 2-3, exact deltas with best-fit ties, GPU-weighted shapes,
scarcity weighting, per-shape caps) are in docs/benchmarks/sched.md; the defaults are the winners.
"""

from __future__ import annotations

import numpy as np

from gpufleet.schedule.frag import FragModel, WorkloadDistribution, after_states
from gpufleet.schedule.pin_pressure import PinPressure
from gpufleet.schedule.policies import best_fit_gpus, pick_max
from gpufleet.schedule.table import I64, NodeTable, PodRequest

_ShapeKey = tuple[int, int, int, int, tuple[str, ...]]


def _fgd_score(delta: np.ndarray) -> np.ndarray:
    """FGD's score form: ``int(sigmoid(delta / 1000) * 100)``."""
    score: np.ndarray = np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))
    return score


class _CachedFragPolicy:
    name = "frag"
    rank: I64 | None = None
    model_epoch = 0  # bumped whenever the model changes: a cache of this policy's choices keys on it

    def __init__(self, table: NodeTable, model: FragModel | None) -> None:
        self.model = model
        n = table.n_nodes
        self._shape_ids: dict[_ShapeKey, int] = {}
        self._cap = 64
        # shape-major so that one shape's column over all nodes is contiguous
        self._score = np.zeros((self._cap, n), dtype=np.float64)
        self._slot_left = np.full((self._cap, n), -1, dtype=np.int16)  # milli left on the chosen GPU
        self._ver = np.full((self._cap, n), -1, dtype=np.int64)
        self._delta = np.zeros((self._cap, n), dtype=np.float64)  # fragment removed by the chosen option
        self._before = np.zeros(n, dtype=np.float64)
        self._before_ver = np.full(n, -1, dtype=np.int64)

    def observe(self, req: PodRequest) -> None:
        return None

    def set_model(self, model: FragModel) -> None:
        self.model = model
        self.model_epoch += 1
        self._ver[:] = -1
        self._before_ver[:] = -1

    def _sid(self, req: PodRequest) -> int:
        # the score of a node depends on what the request consumes, not on which models it accepts
        key = (req.cpu_milli, req.gpu_milli, req.num_gpu, req.memory_mib, ())
        sid = self._shape_ids.get(key)
        if sid is None:
            sid = len(self._shape_ids)
            self._shape_ids[key] = sid
            if sid >= self._cap:
                grow = self._cap
                n = self._score.shape[1]
                self._score = np.vstack([self._score, np.zeros((grow, n))])
                self._slot_left = np.vstack([self._slot_left, np.full((grow, n), -1, dtype=np.int16)])
                self._ver = np.vstack([self._ver, np.full((grow, n), -1, dtype=np.int64)])
                self._delta = np.vstack([self._delta, np.zeros((grow, n))])
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

    def _evaluate(self, table: NodeTable, req: PodRequest, nodes: I64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Score (higher is better), milli left on the chosen GPU slot (or -1) and the chosen option's
        fragment reduction, per node."""
        assert self.model is not None
        before = self._frag_before(table, nodes)
        states, cpu, mem, of, slot, valid = after_states(table, nodes, req)
        per = valid.size // nodes.size
        vi = np.flatnonzero(valid)
        flat = np.full(valid.size, -np.inf)
        raw = np.full(valid.size, -np.inf)
        if vi.size:
            after = self.model.amount(states[vi], cpu[vi], mem[vi], of[vi])
            raw[vi] = np.repeat(before, per)[vi] - after
            flat[vi] = self._option_score(raw[vi], states[vi], cpu[vi], mem[vi], table.gpu_left_milli.shape[1])
        score = flat.reshape(nodes.size, per)
        best = np.argmax(score, axis=1)  # first index among equal scores
        rows = np.arange(nodes.size)
        chosen = slot.reshape(nodes.size, per)[rows, best]
        left = np.where(chosen >= 0, table.gpu_left_milli[nodes, np.maximum(chosen, 0)], -1)
        return score[rows, best], left, raw.reshape(nodes.size, per)[rows, best]

    def _option_score(self, delta: np.ndarray, states: np.ndarray, cpu: I64, mem: I64, g: int) -> np.ndarray:
        raise NotImplementedError

    def _pick(self, scores: np.ndarray, candidates: I64, table: NodeTable, rng: np.random.Generator) -> int:
        return pick_max(scores, candidates, self.rank, rng)

    def _scores(self, table: NodeTable, req: PodRequest, sid: int, candidates: I64) -> np.ndarray:
        cached: np.ndarray = self._score[sid, candidates]
        return cached

    def choose(
        self, table: NodeTable, req: PodRequest, candidates: I64, rng: np.random.Generator
    ) -> tuple[int, tuple[int, ...]]:
        sid = self._sid(req)
        ver = self._ver[sid]
        stale = candidates[ver[candidates] != table.version[candidates]]
        if stale.size > 32:  # nodes in the same state score the same: evaluate one of each
            _, first, inv = np.unique(table.state_hash[stale], return_index=True, return_inverse=True)
            sc, sl, dl = self._evaluate(table, req, stale[first])
            sc, sl, dl = sc[inv], sl[inv], dl[inv]
        elif stale.size:
            sc, sl, dl = self._evaluate(table, req, stale)
        if stale.size:
            self._score[sid, stale] = sc
            self._slot_left[sid, stale] = sl
            self._delta[sid, stale] = dl
            ver[stale] = table.version[stale]
        node = self._pick(self._scores(table, req, sid, candidates), candidates, table, rng)
        if req.is_share:
            left = table.gpu_left_milli[node]
            return node, (int(np.flatnonzero(left == self._slot_left[sid, node])[0]),)
        return node, best_fit_gpus(table, node, req)


class FgdPolicy(_CachedFragPolicy):
    """FGD as published: fixed distribution (the trace's typical pods), integer sigmoid score."""

    name = "fgd"

    def _option_score(self, delta: np.ndarray, states: np.ndarray, cpu: I64, mem: I64, g: int) -> np.ndarray:
        return _fgd_score(delta)


class GpufleetPolicy(_CachedFragPolicy):
    """Ours: online distribution, memory-aware fragment, CPU/memory feed cap. See the module docstring.

    Options exist for the ablation in docs/benchmarks/sched.md; the defaults are the policy.
    ``capacity="none"`` drops the CPU/memory feed cap (FGD's fragment learned online);
    ``model_access="fragment"`` reads GPU-model constraints as FGD does.
    """

    name = "gpufleet"

    def __init__(
        self,
        table: NodeTable,
        *,
        use_memory: bool = True,
        capacity: str = "ratio",
        max_shapes: int = 64,
        drift_tv: float = 0.05,
        model_access: str = "neutral",
        pin_pressure: bool = True,
    ) -> None:
        super().__init__(table, None)
        self.model_access = model_access
        self.pins = PinPressure(table) if pin_pressure else None
        self._table = table
        self.use_memory = use_memory
        self.capacity = capacity
        self.max_shapes = max_shapes
        self.drift_tv = drift_tv
        self._model_probs: dict[_ShapeKey, float] = {}
        self._counts: dict[_ShapeKey, float] = {}
        self._seen = 0
        self._next_refresh = 1

    def observe(self, req: PodRequest) -> None:
        if self.pins is not None:
            self.pins.observe(req)
        if req.num_gpu == 0:
            return  # a CPU-only task is never blocked by GPU fragments (its CPU is in the node state)
        mem = req.memory_mib if self.use_memory else 0
        key = (req.cpu_milli, req.gpu_milli, req.num_gpu, mem, req.gpu_models)
        self._counts[key] = self._counts.get(key, 0.0) + 1.0
        self._seen += 1
        if self._seen >= self._next_refresh:
            self._next_refresh = self._seen * 2
            self._refresh()

    def _refresh(self) -> None:
        """Rebuild the model from the shapes seen so far (the ``max_shapes`` most frequent, renormalised).

        After 1,024 requests a rebuild happens only if the distribution drifted by more than ``drift_tv``
        (total variation): a rebuild invalidates every cached score, so it is not done for noise."""
        top = dict(sorted(self._counts.items(), key=lambda kv: -kv[1])[: self.max_shapes])
        total = sum(top.values())
        probs = {k: v / total for k, v in top.items()}
        if self.model is not None and self._seen > 1024:
            keys = set(probs) | set(self._model_probs)
            tv = 0.5 * sum(abs(probs.get(k, 0.0) - self._model_probs.get(k, 0.0)) for k in keys)
            if tv <= self.drift_tv:
                return
        self._model_probs = probs
        dist = WorkloadDistribution.from_counts(top)
        self.set_model(
            FragModel.build(
                dist,
                self._table,
                use_memory=self.use_memory,
                include_cpu_shapes=False,
                capacity=self.capacity,
                model_access=self.model_access,
            )
        )

    def choose(
        self, table: NodeTable, req: PodRequest, candidates: I64, rng: np.random.Generator
    ) -> tuple[int, tuple[int, ...]]:
        if self.model is None:  # nothing learned yet (only CPU-only requests so far): best fit on GPUs
            free = table.gpu_left_milli[candidates].sum(axis=1)
            node = int(candidates[int(np.argmin(free))])
            return node, best_fit_gpus(table, node, req)
        return super().choose(table, req, candidates, rng)

    def _pick(self, scores: np.ndarray, candidates: I64, table: NodeTable, rng: np.random.Generator) -> int:
        best = np.flatnonzero(scores == scores.max())
        if self.rank is not None and best.size > 1:
            return int(candidates[best[np.argmin(self.rank[candidates[best]])]])
        return int(candidates[best[0]])  # no tie order given: the node table's order (deterministic)

    def _scores(self, table: NodeTable, req: PodRequest, sid: int, candidates: I64) -> np.ndarray:
        """FGD's integer score, less the pinned demand a flexible request would displace (see
        :mod:`gpufleet.schedule.pin_pressure`): ``claim`` of the node's model per GPU milli placed."""
        models = table.gpu_model[candidates]
        # nothing pinned yet, a CPU-only request, or one model among the candidates (a pinned request's, or a
        # one-model table's): no charge, or a constant one that changes no choice
        if self.pins is None or not self.pins.active or req.total_gpu_milli == 0 or (models == models[0]).all():
            return super()._scores(table, req, sid, candidates)
        claim = self.pins.claims(table)[np.maximum(models, 0)]
        return _fgd_score(self._delta[sid, candidates] - req.total_gpu_milli * claim)

    def _option_score(self, delta: np.ndarray, states: np.ndarray, cpu: I64, mem: I64, g: int) -> np.ndarray:
        # FGD's score form; equal scores go to the earliest node in the tie order, which keeps filling the
        # same nodes (a measured win over exact deltas, see docs)
        return _fgd_score(delta)
