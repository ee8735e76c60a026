"""Review: leader election against the real API server (split brain after seeing another holder)."""

from __future__ import annotations

import uuid

from gpufleet.adapters.kubernetes.lease import LeaderElector
from gpufleet.adapters.kubernetes.rest import Kube


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_holder_that_sees_another_live_holder_stops_leading(kube: Kube, ns: str) -> None:
    """Review (fixed), the defect: LeaderElector.try_acquire_or_renew returns False when the GET shows another identity
    holding a live Lease, but leaves ``_renewed_at`` as it was, so ``is_leader()`` (what Controller.leading() and _bind
    check before every write) stays True for up to lease_duration - safety seconds. With clock skew between two
    controllers (A's clock 20 s behind B's) B legitimately takes the Lease while A keeps binding/evicting: both act at
    once (split brain). client-go's IsLeader() turns False as soon as it observes another holder."""
    name = f"l-{uuid.uuid4().hex[:6]}"
    true_time = 1_700_000_000.0
    a_clock = Clock(true_time - 20.0)  # A's clock is 20 s behind
    b_clock = Clock(true_time)
    a = LeaderElector(kube, ns, name, "a", lease_duration_s=15, renew_s=2, safety_s=2, clock=a_clock)
    b = LeaderElector(kube, ns, name, "b", lease_duration_s=15, renew_s=2, safety_s=2, clock=b_clock)
    assert a.try_acquire_or_renew() and a.is_leader()
    # B reads A's renewTime (20 s in B's past): expired for B, so B takes the Lease, as the protocol allows
    assert b.try_acquire_or_renew() and b.is_leader()
    holder = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}")["spec"]["holderIdentity"]
    assert holder == "b"
    # one second later (both clocks), A's next round sees B holding a live Lease
    a_clock.t += 1.0
    b_clock.t += 1.0
    assert a.try_acquire_or_renew() is False
    assert b.is_leader()
    assert not a.is_leader(), "A saw B hold the Lease yet still reports itself leader: both controllers act"
