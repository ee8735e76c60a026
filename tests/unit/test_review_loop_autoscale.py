"""Review (decision loop): replica counts stay within the fleet's [min_replicas, max_replicas]."""

from __future__ import annotations

from gpufleet.autoscale.baselines import HpaPolicy
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaSignals


def test_hpa_starting_from_zero_asks_for_at_least_min_replicas() -> None:
    """Review (fixed), the defect: ``autoscale/baselines.py::HpaPolicy.decide`` clamps its recommendation to
    ``min_replicas`` and then applies the scale-up rate limit (max(100%, 4 pods) per sync) from the current count, so a
    fleet with ``min_replicas=20`` and no replica yet is told 5. Kubernetes' HPA sets a fleet below minReplicas to
    minReplicas at once ("Current number of replicas below Spec.MinReplicas"); the promise is a count within [min, max].
    """
    scaling = ServingScaling(min_replicas=20, max_replicas=40, target_rps_per_replica=10.0)
    hpa = HpaPolicy(target_utilization=0.7)
    d = hpa.decide(ReplicaSignals(0.0, 0, 0, 15.0, 0.0, 0.0, 0, 0.0), scaling)
    assert scaling.min_replicas <= d.desired <= scaling.max_replicas, d


def test_hpa_within_tolerance_below_min_is_raised_to_min() -> None:
    """Review (fixed), the defect (same line): 2 ready replicas at the target utilization are 'within tolerance'; the
    recommendation is clamped up to ``min_replicas`` (20) but rate-limited back down to 6, below the floor the fleet
    declared."""
    scaling = ServingScaling(min_replicas=20, max_replicas=40, target_rps_per_replica=10.0)
    hpa = HpaPolicy(target_utilization=0.7)
    d = hpa.decide(ReplicaSignals(15.0, 2, 0, 15.0, 1.0, 0.0, 0, 1.4), scaling)
    assert d.desired >= scaling.min_replicas, d
