"""Capacity that frees before a launched node would be ready: what the node scaler may wait for instead of launching.

A part of :class:`~gpufleet.sim.world.World`. A running training job reports when it expects to end, like the
time to completion a trainer prints from its progress (steps done of a known total, at its measured step rate).
The simulator models that report as the true remaining run time scaled by a per-run factor ``1 + e``, with ``e``
normal with sd ``control.eta_error_sd`` (a misestimated step rate; drawn from keyed common random numbers, so it
does not shift any other draw), so the estimate is off by ``e`` times the remaining time. Serving replicas never
report an end. The control plane sees the estimate only, never the true end.

A pod that waits for freeing nodes claims them, so pods behind it do not count the same nodes, and is looked at
again just after the last of them is expected to free (event ``RECHECK``): if the estimate was late or another
pod took the nodes, it launches then.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING

from gpufleet.sim.crn import keyed_prefix, uniform_after
from gpufleet.sim.kinds import QUEUED, RUNNING
from gpufleet.sim.lifecycle import NodeState

if TYPE_CHECKING:
    from gpufleet.sim.fleet import Fleet
    from gpufleet.sim.pods import PodTable

ETA = 3  # crn stream id of the ETA errors (FAIL = 1, PREEMPT = 2)
_Z = NormalDist()
_INF = float("inf")
COMPACT_SLACK = 1024  # a bound heap is compacted when it holds this many entries more than twice its live ones


@dataclass(slots=True)
class FreeingBounds:
    """Per (SKU, window): each node's ``_not_freeing_until`` bound, waiting in a heap until time reaches it.

    ``change``: the node change counter each bound was computed at (a heap entry of an older change is stale);
    ``active``: nodes whose bound has passed (every pod on them may report an end within the window), until
    they change; ``dirty``: nodes changed since the last query (recomputed first)."""

    sku: int
    within_s: int
    heap: list[tuple[float, int, int]] = field(default_factory=list)
    active: dict[int, int] = field(default_factory=dict)
    change: dict[int, int] = field(default_factory=dict)
    dirty: set[int] = field(default_factory=set)
    compact_at: int = 0  # the heap's length beyond which its stale entries are dropped (reset at each compaction)
    compactions: int = 0


def report_beyond_until(end_s: int, mult: float, within_s: int) -> float:
    """Up to this time a job ending at ``end_s`` reports an end (``now + int((end_s - now) * mult)``) later than
    ``now + within_s``: the report is within the window iff ``now > end_s - (within_s + 1) / mult``."""
    return end_s - (within_s + 1) / mult


class FreeingEstimates:
    """The end each running training job reports and the nodes those ends free, with the claims of the pods that
    wait for them. Reads the pod table and the fleet; changes neither."""

    def __init__(self, pods: PodTable, fleet: Fleet, per_node: list[int], seed: int, eta_error_sd: float) -> None:
        self.pods = pods
        self.fleet = fleet
        self.per_node = per_node
        self.seed = seed
        self.eta_error_sd = eta_error_sd
        self.claims: list[dict[int, int]] = [{} for _ in per_node]  # per SKU: pod -> freeing nodes it waits for
        self.eta_memo: dict[int, tuple[int, float]] = {}  # pod -> (run epoch, ETA factor)
        # keyed_uniform(seed, ETA, pod, epoch) mixes the seed and the stream id first: that part is the run's own
        self._eta_key = keyed_prefix(seed, ETA)
        self._bounds: dict[tuple[int, int], FreeingBounds] = {}  # (sku, window) -> bounds
        self._by_sku: dict[int, list[FreeingBounds]] = {}  # the same bounds by SKU (what a changed node dirties)
        # node -> (its change counter, :meth:`_node_runs`): what a query reads of its pods, until the node changes
        self._runs: dict[int, tuple[int, tuple[tuple[int, float, int], ...] | None]] = {}
        # per SKU: (now, index version) -> {(window, GPUs wanted, tiers): expected free times}
        self._memo: dict[int, tuple[tuple[int, int], dict[tuple[int, int, tuple[int, ...]], list[int]]]] = {}

    def run_ended(self, pod: int) -> None:
        """The pod's run ended (released, moved): its next run draws its own ETA factor."""
        self.eta_memo.pop(pod, None)

    def eta_mult(self, pod: int) -> float:
        """The factor ``1 + e`` of ``pod``'s current run (drawn once per run, memoised: the draw is a hash)."""
        epoch = self.pods.epoch[pod]
        hit = self.eta_memo.get(pod)
        if hit is not None and hit[0] == epoch:
            return hit[1]
        sd = self.eta_error_sd
        if sd <= 0:
            m = 1.0
        else:  # keyed_uniform(seed, ETA, pod, epoch), from the run's mixed prefix
            m = 1.0 + sd * _Z.inv_cdf(uniform_after(self._eta_key, pod, epoch))
            if m < 0.1:  # noqa: PLR1730 (max(0.1, m) without the call)
                m = 0.1
        self.eta_memo[pod] = (epoch, m)
        return m

    def eta_s(self, pod: int, now: int) -> int | None:
        """When running training ``pod`` reports it will end (None for serving replicas)."""
        if self.pods.serving[pod] >= 0 or self.pods.state[pod] != RUNNING:
            return None
        left = max(0, self.pods.start[pod] + self.pods.remaining[pod] - now)
        if left == 0:
            return now
        return now + int(left * self.eta_mult(pod))

    def freeing_times(self, s: int, pod: int, now: int, within_s: int) -> list[int]:
        """Sorted times (up to ``now + within_s``) at which busy nodes of SKU ``s`` are expected to fit ``pod``,
        one per node, after the nodes claimed by other waiting pods (the earliest ones)."""
        f = self.fleet
        per = self.per_node[s]
        g = self.pods.gpus[pod]
        want = per if g >= per else g  # GPUs the pod needs free on one node
        tiers = self.pods.tiers(pod)
        # pods and their runs change only with the index (placements, releases), so (now, index version) is an
        # exact stamp: the times of every (window, size, tiers) asked at one stamp are kept until it moves on
        stamp = (now, f.index.version)
        memo = self._memo.get(s)
        if memo is None or memo[0] != stamp:
            memo = self._memo[s] = (stamp, {})
        key = (within_s, want, tiers)
        times = memo[1].get(key)
        if times is None:
            times = memo[1][key] = self.expected_free_times(s, now, within_s, want, tiers)
        claims = self.claims[s]
        for gone in [p for p in claims if self.pods.state[p] != QUEUED]:
            del claims[gone]
        taken = sum(k for p, k in claims.items() if p != pod)
        return times[taken:]

    def expected_free_times(self, s: int, now: int, within_s: int, want: int, tiers: tuple[int, ...]) -> list[int]:
        """Sorted times (up to ``now + within_s``) at which busy nodes of SKU ``s`` on ``tiers`` are expected to
        have ``want`` GPUs free, one per node, from the running training jobs' reported ends.

        Only the nodes whose every pod may already report an end within the window are looked at: their
        ``_not_freeing_until`` bound (cached per node change) has passed. Bounds wait in a heap until ``now``
        reaches them (time only moves forward), so a query costs the nodes that changed since the last one
        plus the few nodes about to free, not a scan of every busy node."""
        f = self.fleet
        per = self.per_node[s]
        limit = now + within_s
        st = self._state(s, within_s)
        self._refresh_bounds(st, now)
        times: list[int] = []
        n_free, n_state, n_pool, pools, change = f.n_free, f.n_state, f.n_pool, f.pools, f.n_change
        up = NodeState.UP
        runs_memo = self._runs
        for node in st.active:
            free = n_free[node]
            if free >= want or n_state[node] != up or pools[n_pool[node]].tier_rank not in tiers:
                continue  # not one of the busy schedulable nodes the pod could use
            ch = change[node]
            hit = runs_memo.get(node)
            if hit is None or hit[0] != ch:
                hit = runs_memo[node] = (ch, self._node_runs(node, per))
            runs = hit[1]
            if runs is None:
                continue  # a serving replica (or a pod not running) on it reports no end
            ends: list[tuple[int, int]] = []
            for end, mult, gpus in runs:
                left = end - now
                eta = now + int(left * mult) if left > 0 else now
                if eta > limit:
                    break
                ends.append((eta, gpus))
            else:
                ends.sort()
                got = free
                for eta, gpus in ends:
                    got += gpus
                    if got >= want:
                        times.append(eta if eta > now else now)
                        break
        times.sort()
        return times

    def _node_runs(self, node: int, per: int) -> tuple[tuple[int, float, int], ...] | None:
        """What :meth:`expected_free_times` reads of each pod on ``node``: (end, ETA factor, GPUs it frees on one
        node), in the node's pod order; None when a serving replica or a pod not running is on it. Kept per node
        change (``Fleet.n_change``): a pod's end, run and state change only with a release or a placement, which
        change its nodes."""
        pods = self.pods
        serving, state, start, remaining, gpus_of = pods.serving, pods.state, pods.start, pods.remaining, pods.gpus
        memo, epoch = self.eta_memo, pods.epoch
        out = []
        for p in self.fleet.n_pods[node]:
            if serving[p] >= 0 or state[p] != RUNNING:
                return None
            hit = memo.get(p)
            mult = hit[1] if hit is not None and hit[0] == epoch[p] else self.eta_mult(p)
            g = gpus_of[p]
            out.append((start[p] + remaining[p], mult, g if g < per else per))
        return tuple(out)

    def _state(self, s: int, within_s: int) -> FreeingBounds:
        """The bound heap of (SKU, window); a new one starts with every node of the SKU to compute."""
        key = (s, within_s)
        st = self._bounds.get(key)
        if st is None:
            self._drain_changed()
            st = self._bounds[key] = FreeingBounds(s, within_s)
            self._by_sku.setdefault(s, []).append(st)
            st.dirty.update(n for n, k in enumerate(self.fleet.n_sku) if k == s)
        return st

    def _drain_changed(self) -> None:
        """Hand the nodes whose pods changed since the last query to every bound heap of their SKU."""
        f = self.fleet
        if not f.changed:
            return
        by_sku = self._by_sku
        n_sku = f.n_sku
        if len(self._bounds) == 1:  # the usual case: one SKU, one window
            (st,) = self._bounds.values()
            s = st.sku
            st.dirty.update([node for node in f.changed if n_sku[node] == s])
        else:
            for node in f.changed:
                for st in by_sku.get(n_sku[node], ()):
                    st.dirty.add(node)
        f.changed.clear()

    def _refresh_bounds(self, st: FreeingBounds, now: int) -> None:
        """Recompute the bounds of changed nodes; move the nodes whose bound ``now`` has reached to ``active``."""
        self._drain_changed()
        f = self.fleet
        change, n_pods = f.n_change, f.n_pods
        heap, active, cur = st.heap, st.active, st.change
        serving, state, start, remaining = self.pods.serving, self.pods.state, self.pods.start, self.pods.remaining
        memo, epoch = self.eta_memo, self.pods.epoch
        reach = st.within_s + 1
        for node in st.dirty:
            ch = change[node]
            cur[node] = ch
            active.pop(node, None)
            pods = n_pods[node]
            if not pods:
                continue  # an empty node frees nothing (it is changed again when a pod lands)
            bound = -_INF  # _not_freeing_until, inlined (this loop runs for every changed node)
            for p in pods:
                if serving[p] >= 0 or state[p] != RUNNING:
                    bound = _INF
                    break
                hit = memo.get(p)
                mult = hit[1] if hit is not None and hit[0] == epoch[p] else self.eta_mult(p)
                b = start[p] + remaining[p] - reach / mult  # report_beyond_until
                if b > bound:  # noqa: PLR1730 (max(bound, b) without the call: the hot loop)
                    bound = b
            if bound == _INF:
                continue  # a serving replica (or a pod not running) on it: no end until it changes
            key = bound - 1e-3
            if now >= key:
                active[node] = ch
            else:
                heapq.heappush(heap, (key, ch, node))
        st.dirty.clear()
        if len(heap) > st.compact_at:
            self._compact(st)
            heap = st.heap
        while heap and heap[0][0] <= now:
            _key, ch, node = heapq.heappop(heap)
            if cur.get(node) == ch:
                active[node] = ch

    @staticmethod
    def _compact(st: FreeingBounds) -> None:
        """Drop the heap's stale entries (of a node changed since: every recomputed bound is pushed anew and the
        old entry stays until time reaches it). Exact: a stale entry is skipped when popped, and the live ones
        pop in the same order from a heap of fewer entries."""
        cur = st.change
        live = [e for e in st.heap if cur.get(e[2]) == e[1]]
        heapq.heapify(live)
        st.heap = live
        st.compactions += 1
        st.compact_at = 2 * len(live) + COMPACT_SLACK

    def not_freeing_until(self, node: int, within_s: int) -> float:
        """A time up to which ``node`` cannot have all its pods report an end within ``within_s``: a pod's report
        ``now + int((end - now) * m)`` is within the window only if ``now > end - (within_s + 1) / m``. Exact for
        the node's current pods (cached on the node's change counter); inf while a serving replica runs on it."""
        bound = -float("inf")
        for p in self.fleet.n_pods[node]:
            if self.pods.serving[p] >= 0 or self.pods.state[p] != RUNNING:
                return float("inf")
            bound = max(
                bound, report_beyond_until(self.pods.start[p] + self.pods.remaining[p], self.eta_mult(p), within_s)
            )
        return bound
