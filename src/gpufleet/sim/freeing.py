"""Capacity that frees before a launched node would be ready: what the node scaler may wait for instead of launching.

A mixin of :class:`~gpufleet.sim.world.World`. A running training job reports when it expects to end, like the
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

from statistics import NormalDist
from typing import TYPE_CHECKING

from gpufleet.sim.crn import keyed_uniform
from gpufleet.sim.kinds import QUEUED, RUNNING

if TYPE_CHECKING:
    from gpufleet.sim.fleet import Fleet
    from gpufleet.sim.scenario import Scenario

ETA = 3  # crn stream id of the ETA errors (FAIL = 1, PREEMPT = 2)
_Z = NormalDist()


def report_beyond_until(end_s: int, mult: float, within_s: int) -> float:
    """Up to this time a job ending at ``end_s`` reports an end (``now + int((end_s - now) * mult)``) later than
    ``now + within_s``: the report is within the window iff ``now > end_s - (within_s + 1) / mult``."""
    return end_s - (within_s + 1) / mult


class FreeingMixin:
    """Mixin: estimated job ends and the nodes they free. Declares the parts of the world it uses."""

    if TYPE_CHECKING:
        sc: Scenario
        seed: int
        fleet: Fleet
        per_node: list[int]
        p_epoch: list[int]
        p_gpus: list[int]
        p_remaining: list[int]
        p_serving: list[int]
        p_sku: list[int]
        p_start: list[int]
        p_state: list[int]
        freeing_claims: list[dict[int, int]]
        _eta_memo: dict[int, tuple[int, float]]
        _node_bounds: dict[int, tuple[int, int, float]]
        _freeing_memo: dict[int, tuple[tuple[int, int, int, int, tuple[int, ...], int], list[int]]]

        def _tiers(self, pod: int) -> tuple[int, ...]: ...

    def _eta_mult(self, pod: int) -> float:
        """The factor ``1 + e`` of ``pod``'s current run (drawn once per run, memoised: the draw is a hash)."""
        epoch = self.p_epoch[pod]
        hit = self._eta_memo.get(pod)
        if hit is not None and hit[0] == epoch:
            return hit[1]
        sd = self.sc.control.eta_error_sd
        m = 1.0 if sd <= 0 else max(0.1, 1.0 + sd * _Z.inv_cdf(keyed_uniform(self.seed, ETA, pod, epoch)))
        self._eta_memo[pod] = (epoch, m)
        return m

    def _eta_s(self, pod: int, now: int) -> int | None:
        """When running training ``pod`` reports it will end (None for serving replicas)."""
        if self.p_serving[pod] >= 0 or self.p_state[pod] != RUNNING:
            return None
        left = max(0, self.p_start[pod] + self.p_remaining[pod] - now)
        if left == 0:
            return now
        return now + int(left * self._eta_mult(pod))

    def _freeing_times(self, s: int, pod: int, now: int, within_s: int) -> list[int]:
        """Sorted times (up to ``now + within_s``) at which busy nodes of SKU ``s`` are expected to fit ``pod``,
        one per node, after the nodes claimed by other waiting pods (the earliest ones)."""
        f = self.fleet
        per = self.per_node[s]
        g = self.p_gpus[pod]
        want = per if g >= per else g  # GPUs the pod needs free on one node
        tiers = self._tiers(pod)
        key = (s, now, within_s, want, tiers, f.index.version)
        hit = self._freeing_memo.get(s)
        if hit is not None and hit[0] == key:
            times = hit[1]
        else:  # pods and their runs change only with the index (placements, releases), so the key is exact
            times = self._expected_free_times(s, now, within_s, want, tiers)
            self._freeing_memo[s] = (key, times)
        claims = self.freeing_claims[s]
        for gone in [p for p in claims if self.p_state[p] != QUEUED]:
            del claims[gone]
        taken = sum(k for p, k in claims.items() if p != pod)
        return times[taken:]

    def _expected_free_times(self, s: int, now: int, within_s: int, want: int, tiers: tuple[int, ...]) -> list[int]:
        """Sorted times (up to ``now + within_s``) at which busy nodes of SKU ``s`` on ``tiers`` are expected to
        have ``want`` GPUs free, one per node, from the running training jobs' reported ends."""
        f = self.fleet
        per = self.per_node[s]
        limit = now + within_s
        times: list[int] = []
        serving, state, start, remaining, gpus_of = (
            self.p_serving,
            self.p_state,
            self.p_start,
            self.p_remaining,
            self.p_gpus,
        )
        bounds, change = self._node_bounds, f.n_change
        get_bound = bounds.get
        for t in tiers:
            for free in range(want):
                for node in f.index.iter_with_free(s, t, free):  # the loop never changes the index
                    hit = get_bound(node)
                    if hit is None or hit[0] != change[node] or hit[1] != within_s:
                        hit = (change[node], within_s, self._not_freeing_until(node, within_s))
                        bounds[node] = hit
                    if now < hit[2] - 1e-3:
                        continue  # some pod on it reports an end beyond the window until then
                    ends: list[tuple[int, int]] = []
                    for p in f.n_pods[node]:
                        if serving[p] >= 0 or state[p] != RUNNING:
                            break  # a serving replica reports no end
                        left = start[p] + remaining[p] - now
                        eta = now + int(left * self._eta_mult(p)) if left > 0 else now
                        if eta > limit:
                            break
                        ends.append((eta, min(gpus_of[p], per)))
                    else:
                        ends.sort()
                        got = free
                        for eta, gpus in ends:
                            got += gpus
                            if got >= want:
                                times.append(max(eta, now))
                                break
        times.sort()
        return times

    def _not_freeing_until(self, node: int, within_s: int) -> float:
        """A time up to which ``node`` cannot have all its pods report an end within ``within_s``: a pod's report
        ``now + int((end - now) * m)`` is within the window only if ``now > end - (within_s + 1) / m``. Exact for
        the node's current pods (cached on the node's change counter); inf while a serving replica runs on it."""
        bound = -float("inf")
        for p in self.fleet.n_pods[node]:
            if self.p_serving[p] >= 0 or self.p_state[p] != RUNNING:
                return float("inf")
            bound = max(bound, report_beyond_until(self.p_start[p] + self.p_remaining[p], self._eta_mult(p), within_s))
        return bound
