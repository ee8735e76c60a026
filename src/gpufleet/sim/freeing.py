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

        def _tiers(self, pod: int) -> tuple[int, ...]: ...

    def _eta_s(self, pod: int, now: int) -> int | None:
        """When running training ``pod`` reports it will end (None for serving replicas)."""
        if self.p_serving[pod] >= 0 or self.p_state[pod] != RUNNING:
            return None
        left = max(0, self.p_start[pod] + self.p_remaining[pod] - now)
        sd = self.sc.control.eta_error_sd
        if sd <= 0 or left == 0:
            return now + left
        e = sd * _Z.inv_cdf(keyed_uniform(self.seed, ETA, pod, self.p_epoch[pod]))
        return now + int(left * max(0.1, 1.0 + e))

    def _freeing_times(self, s: int, pod: int, now: int, within_s: int) -> list[int]:
        """Sorted times (up to ``now + within_s``) at which busy nodes of SKU ``s`` are expected to fit ``pod``,
        one per node, after the nodes claimed by other waiting pods (the earliest ones)."""
        f = self.fleet
        per = self.per_node[s]
        g = self.p_gpus[pod]
        want = per if g >= per else g  # GPUs the pod needs free on one node
        limit = now + within_s
        times: list[int] = []
        for t in self._tiers(pod):
            for free in range(want):
                for node in f.index.nodes_with_free(s, t, free):
                    ends: list[tuple[int, int]] = []
                    for p in f.n_pods[node]:
                        eta = self._eta_s(p, now)
                        if eta is None or eta > limit:
                            break
                        ends.append((eta, min(self.p_gpus[p], per)))
                    else:
                        ends.sort()
                        got = free
                        for eta, gpus in ends:
                            got += gpus
                            if got >= want:
                                times.append(max(eta, now))
                                break
        times.sort()
        claims = self.freeing_claims[s]
        for gone in [p for p in claims if self.p_state[p] != QUEUED]:
            del claims[gone]
        taken = sum(k for p, k in claims.items() if p != pod)
        return times[taken:]
