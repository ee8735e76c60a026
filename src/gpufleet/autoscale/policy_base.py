"""The part every replica policy shares: the rate-only entry of :class:`gpufleet.ports.ReplicaAutoscaler` and its
fast path's default (no reaction)."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals, rate_signals


@mypyc_attr(allow_interpreted_subclasses=True)  # an extension point: a user's replica policy subclasses it
class RatePolicy:
    """Gives a policy that implements ``decide`` the port's ``desired`` (a world that observes only the rate) and a
    ``react`` that does nothing (a policy with a fast path overrides it)."""

    name: str
    period_s: float

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        raise NotImplementedError

    def react(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision | None:
        """The port's fast path (a queue seen growing between two ``decide`` calls): no reaction unless the policy
        says otherwise."""
        del signals, scaling
        return None

    def desired(
        self, *, current: int, observed_rps: float, scaling: ServingScaling, now_s: int, last_scale_down_s: int
    ) -> tuple[int, str]:
        """``decide`` on :func:`~gpufleet.ports.rate_signals`; ``last_scale_down_s`` is not needed (every policy
        keeps its own scale-down window)."""
        del last_scale_down_s
        d = self.decide(rate_signals(current, observed_rps, scaling, now_s, self.period_s), scaling)
        return d.desired, d.reason
