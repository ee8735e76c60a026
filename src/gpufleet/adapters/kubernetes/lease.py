"""Leader election with a ``coordination.k8s.io/v1`` Lease (client-go's protocol, optimistic concurrency).

A candidate acquires the Lease when it does not exist, when it already holds it, or when the holder's
``renewTime + leaseDurationSeconds`` has passed; every write is a PUT carrying the ``resourceVersion`` it
read, so two candidates racing for an expired Lease cannot both win (the loser gets 409). The holder renews
every ``renew_s``; :meth:`LeaderElector.is_leader` is true only while the last successful renewal is younger
than ``lease_duration_s - safety_s`` by the local clock, so a holder that cannot renew stops acting before any
other candidate may take over, and false at once when a round sees another holder's live Lease or loses a write
race (409): with clocks that disagree, another candidate may rightly have taken it already. :meth:`release` empties ``holderIdentity`` on graceful shutdown (the next
candidate takes over at once instead of waiting out the lease).

:attr:`LeaderElector.term` counts this candidate's spells of leadership: a round that makes it the leader when it was
not (it acquired the Lease, or renewed it after its leadership had lapsed) starts a new term. Between two terms
another candidate may have led and acted, so whatever a leader keeps in memory belongs to its term (the controller
rebuilds it from the cluster when the term changes: ``adapters/kubernetes/controller.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from gpufleet.adapters.kubernetes.rest import JSON, ApiError, Kube


def _fmt(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration_s: int = 15,
        renew_s: float = 2.0,
        safety_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_s = renew_s
        self.safety_s = safety_s
        self.clock = clock
        self._renewed_at = -1e18
        self.transitions = 0
        self.term = 0  # this candidate's spells of leadership so far (the module docstring)

    def is_leader(self) -> bool:
        return self.clock() - self._renewed_at < self.lease_duration_s - self.safety_s

    def due(self) -> bool:
        return self.clock() - self._renewed_at >= self.renew_s

    def _spec(self, now: float, acquired: float, transitions: int) -> JSON:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration_s,
            "acquireTime": _fmt(acquired),
            "renewTime": _fmt(now),
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        """One round of the protocol; returns whether this candidate holds the Lease now (a new :attr:`term` when it
        did not lead before the round)."""
        now = self.clock()
        was = self.is_leader()
        try:
            try:
                lease = self.kube.get(f"{self.path}/{self.name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": self._spec(now, now, 0)}  # fmt: skip
                self.kube.post(self.path, body)
                self._lead(now, was)
                self.transitions += 1
                return True
            spec = lease.get("spec", {})
            holder = spec.get("holderIdentity") or ""
            renew = _parse(spec["renewTime"]) if spec.get("renewTime") else 0.0
            duration = int(spec.get("leaseDurationSeconds") or self.lease_duration_s)
            mine = holder == self.identity
            if not mine and holder and now < renew + duration:
                self._renewed_at = -1e18  # somebody else holds a live lease: stop acting now (client-go's IsLeader)
                return False
            trans = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
            acquired = _parse(spec["acquireTime"]) if mine and spec.get("acquireTime") else now
            lease["spec"] = self._spec(now, acquired, trans)
            self.kube.put(f"{self.path}/{self.name}", lease)  # carries metadata.resourceVersion: 409 if raced
            if not mine:
                self.transitions += 1
            self._lead(now, was)
            return True
        except ApiError as exc:
            if exc.status == 409:  # another candidate wrote the Lease since it was read: it is theirs now
                self._renewed_at = -1e18
            return self.is_leader()  # a failed round keeps leadership only until the local deadline

    def _lead(self, now: float, was: bool) -> None:
        """A round that holds the Lease at ``now``: a new term unless this candidate led when the round began."""
        self._renewed_at = now
        if not was:
            self.term += 1

    def release(self) -> None:
        if not self.is_leader():
            return
        try:
            lease = self.kube.get(f"{self.path}/{self.name}")
            if lease.get("spec", {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["renewTime"] = _fmt(0.0 + 1.0)
                self.kube.put(f"{self.path}/{self.name}", lease)
        except ApiError:
            pass
        self._renewed_at = -1e18
