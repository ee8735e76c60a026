"""Review (k8s): the Lease elector's terms (``LeaderElector.term``), which the controller's per-leader memory follows."""

from __future__ import annotations

import copy
from typing import Any

from gpufleet.adapters.kubernetes.lease import LeaderElector
from gpufleet.adapters.kubernetes.rest import ApiError


class _Leases:
    """One Lease in memory with the API server's optimistic concurrency (resourceVersion)."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.rv = 0

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        if self.obj is None:
            raise ApiError(404, "NotFound", "not found")
        return copy.deepcopy(self.obj)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.obj = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.rv)}}
        return copy.deepcopy(self.obj)

    def put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.obj is not None
        if body["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "conflict")
        return self.post(path, body)


def test_a_term_begins_each_time_the_candidate_comes_to_lead() -> None:
    """Review (fixed; see tests/integration/k8s/test_review_k8s_regain.py): the controller could not tell a lead
    regained from a lead kept. A term begins on acquiring the Lease and on renewing it after leadership lapsed; a
    renewal while leading keeps the term."""
    t = [1000.0]
    leases = _Leases()
    a = LeaderElector(leases, "ns", "l", "a", lease_duration_s=15, clock=lambda: t[0])  # type: ignore[arg-type]
    b = LeaderElector(leases, "ns", "l", "b", lease_duration_s=15, clock=lambda: t[0])  # type: ignore[arg-type]
    assert a.try_acquire_or_renew() and a.term == 1
    t[0] += 2
    assert a.try_acquire_or_renew() and a.term == 1  # renewed while leading: the same term
    t[0] += 20  # a stalled: its lease expired
    assert b.try_acquire_or_renew() and b.term == 1 and not a.is_leader()
    assert not a.try_acquire_or_renew() and a.term == 1
    b.release()
    assert a.try_acquire_or_renew() and a.term == 2  # taken back: a new term
    t[0] += 14  # a's renewals failed for longer than lease - safety: it stopped leading, nobody took the Lease
    assert not a.is_leader()
    assert a.try_acquire_or_renew() and a.term == 3  # renewed after a lapse: a new term all the same
