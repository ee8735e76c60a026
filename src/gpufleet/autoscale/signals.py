"""What a replica autoscaler sees and returns: defined once in :mod:`gpufleet.ports` (re-exported here for the
callers that still import them from this module; new code imports them from ports)."""

from __future__ import annotations

from gpufleet.ports import ReplicaDecision, ReplicaSignals

__all__ = ["ReplicaDecision", "ReplicaSignals"]
