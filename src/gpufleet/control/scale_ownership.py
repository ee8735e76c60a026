"""Who owns a Deployment's replicas: the decisions replica scaling makes before it acts (pure; no I/O).

gpufleet writes one field, ``spec.replicas``, and so may others: an HorizontalPodAutoscaler, a human's
``kubectl scale``, a GitOps sync. Two writers of one field undo each other every period (flapping), so replica
scaling leaves a Deployment alone, with a reason code and the facts for its audit (:class:`HandsOff`), when:

- it is annotated ``gpufleet.io/managed: "false"`` (:data:`NOT_MANAGED`);
- an HPA targets it (:data:`HPA_MANAGES`, with the HPA's name) (:func:`left_alone`);
- its replicas are not those gpufleet last wrote (:data:`SCALED_BY_OTHER`, with ``wrote`` and ``replicas_now``):
  someone else scaled it, and their count stands for :data:`HOLD_S`, doubled each time it happens again without a
  write of gpufleet's surviving in between (at most :data:`HOLD_MAX_S`) (:class:`ScaleOwnership`). What gpufleet
  last wrote is this leader's memory, and for a Deployment it has no memory of (a new leader after a failover or a
  restart, or one that regained the Lease) the record gpufleet's writes leave on the Deployment
  (``ObservedDeployment.scaled_replicas``: any leader's last write, ``wrote_from: record`` in the audit): a
  ``kubectl scale`` made while no one led, or while another leader did, is held all the same. A Deployment with no
  record (never scaled by gpufleet, or scaled before the record existed) is no evidence of anyone else: its replicas
  are taken as they are. The record is as trustworthy as the replica count: whoever can scale the Deployment can
  write it too.

And it never takes a Deployment to zero when nothing would see its first request after: when its rate is read from
its own pods there is no series once no pod runs, so a decision of 0 is lifted to 1 (:data:`NO_WAKE_SIGNAL`,
:func:`wake_floor`). A rate query reads the pods when it selects its series by pod (:func:`reads_pods`: the default
query, or any ``gpufleet.io/rps-query`` with a ``pod`` matcher), or when it has been seen to answer nothing at zero
replicas: a Deployment at zero whose query answers with no series is not read as idle (no data is not zero
traffic, and no data at zero may stay so for good): it is woken to one replica (:data:`NO_SIGNAL_AT_ZERO`,
:func:`wake_unseen`) and its query is taken as the pods' from then on. The Kubernetes adapter
(``adapters/kubernetes/scale_guard.py``) reads the HPAs, says whether a rate comes from the pods and records the audit;
the decisions are here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.control.observation import ObservedDeployment
from gpufleet.control.replicas import ScaleDecision

Key = tuple[str, str]  # (namespace, name)
HOLD_S = 600.0  # someone else's scale stands this long
HOLD_MAX_S = 3600.0  # ... doubled on each recurrence, up to this
NOT_MANAGED = "not_managed"
HPA_MANAGES = "hpa_manages"
SCALED_BY_OTHER = "scaled_by_other"
NO_WAKE_SIGNAL = "no_wake_signal"
NO_SIGNAL_AT_ZERO = "no_signal_at_zero"
# a label matcher (= or =~) on a pod's name: the labels Prometheus' Kubernetes discovery, cAdvisor and older
# kube-state-metrics give a pod's series
_POD_MATCHER = re.compile(r"""[{,]\s*(?:pod|pod_name|kubernetes_pod_name)\s*=~?\s*["'`]""")


@dataclass(frozen=True, slots=True)
class HandsOff:
    """A Deployment replica scaling leaves alone: why (a reason code) and the facts its audit record carries."""

    namespace: str
    name: str
    reason: str  # not_managed, hpa_manages, scaled_by_other
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.name}"


def hold_s(strikes: int) -> float:
    """How long someone else's scale stands after ``strikes`` earlier ones with no write of gpufleet's standing."""
    return min(HOLD_S * 2.0**strikes, HOLD_MAX_S)


def left_alone(
    deployments: Sequence[ObservedDeployment], hpas: Mapping[Key, str]
) -> tuple[list[ObservedDeployment], list[HandsOff]]:
    """``deployments`` without the serving ones not managed or targeted by an HPA (``hpas``: (namespace, name) of
    each Deployment an HPA targets -> the HPA's name), in order; and those left alone, in order."""
    kept: list[ObservedDeployment] = []
    off: list[HandsOff] = []
    for dep in deployments:
        key = (dep.namespace, dep.name)
        if dep.serving is not None and not dep.serving.managed:
            off.append(HandsOff(dep.namespace, dep.name, NOT_MANAGED))
        elif dep.serving is not None and key in hpas:
            off.append(HandsOff(dep.namespace, dep.name, HPA_MANAGES, {"hpa": hpas[key]}))
        else:
            kept.append(dep)
    return kept, off


@dataclass(frozen=True, slots=True)
class Holds:
    """What :meth:`ScaleOwnership.held` found: the Deployments held, and the records a period audits (in order)."""

    keys: set[Key]
    audit: list[HandsOff]


class ScaleOwnership:
    """The replicas gpufleet last wrote and the holds it keeps, per Deployment (one per controller)."""

    def __init__(self) -> None:
        self.wrote: dict[Key, int] = {}  # replicas gpufleet last wrote, until someone else's change is seen
        self._held: dict[Key, float] = {}  # until when someone else's scale stands
        self._strikes: dict[Key, int] = {}
        self._seen: set[Key] = set()  # the Deployments this memory has seen (else: the record on the Deployment)
        self._from_record: set[Key] = set()  # whose ``wrote`` came from that record, until a write of this memory's

    def wrote_replicas(self, namespace: str, name: str, replicas: int) -> None:
        """gpufleet's write of ``replicas`` (or the replicas found at a write that conflicted) stands from now."""
        self.wrote[(namespace, name)] = replicas
        self._from_record.discard((namespace, name))

    def held(self, deployments: Sequence[ObservedDeployment], now: float, *, period: bool) -> Holds:
        """The Deployments whose replicas someone else set (seen now, or still in their hold); at a ``period``
        (not the fast path) a change is detected and the holds are audited. The fast path leaves a Deployment
        whose replicas differ from gpufleet's last write alone too, without a hold or a record (the next period
        decides): it would otherwise scale up over someone's scale-down, and its own write would then hide it."""
        keys: set[Key] = set()
        audit: list[HandsOff] = []
        for dep in deployments:
            key = (dep.namespace, dep.name)
            if key not in self._seen:  # first sight: gpufleet's last write is the one recorded on the Deployment
                self._seen.add(key)
                if key not in self.wrote and dep.scaled_replicas is not None:
                    self.wrote[key] = dep.scaled_replicas
                    self._from_record.add(key)
            wrote = self.wrote.get(key)
            if wrote is not None and dep.replicas != wrote and period:
                strikes = self._strikes.get(key, 0)
                until = now + hold_s(strikes)
                self._held[key], self._strikes[key] = until, strikes + 1
                del self.wrote[key]
                facts: dict[str, object] = {"wrote": wrote, "replicas_now": dep.replicas, "held_until": round(until, 3)}
                if key in self._from_record:
                    self._from_record.discard(key)
                    facts["wrote_from"] = "record"
                audit.append(HandsOff(dep.namespace, dep.name, SCALED_BY_OTHER, facts))
                keys.add(key)
                continue
            if wrote is not None and dep.replicas != wrote:  # the fast path: not its own to take; the period holds it
                keys.add(key)
                continue
            if wrote is not None and dep.replicas == wrote and period:
                self._strikes.pop(key, None)  # gpufleet's last write stood
            held_until = self._held.get(key)
            if held_until is None:
                continue
            if now >= held_until:
                del self._held[key]
                continue
            keys.add(key)
            if period:
                facts = {"replicas_now": dep.replicas, "held_until": round(held_until, 3)}
                audit.append(HandsOff(dep.namespace, dep.name, SCALED_BY_OTHER, facts))
        return Holds(keys, audit)

    def held_until(self, key: Key) -> float | None:
        """Until when someone else's scale of ``key`` stands (None: not held)."""
        return self._held.get(key)

    def strikes(self, key: Key) -> int:
        """How many times in a row someone else's scale of ``key`` was seen with no write of gpufleet's standing."""
        return self._strikes.get(key, 0)


def wake_floor(decision: ScaleDecision, reads_own_pods: bool, max_replicas: int) -> ScaleDecision:
    """``decision``, with a decision of 0 lifted to 1 (at most ``max_replicas``, reason :data:`NO_WAKE_SIGNAL`) when
    the Deployment's rate is read from its own pods (``reads_own_pods``): at zero no pod, no series, and its first
    request would never be seen. A rate that outlives the pods (a gateway's or a queue's counter) lets zero stand."""
    if decision.desired != 0 or not reads_own_pods:
        return decision
    return replace(decision, desired=min(1, max_replicas), reason=NO_WAKE_SIGNAL)


def reads_pods(query: str) -> bool:
    """Whether a request-rate query selects its series by pod (a matcher ``=`` or ``=~`` on ``pod``, ``pod_name`` or
    ``kubernetes_pod_name``, as the default query does): such a rate has no series once no pod runs."""
    return _POD_MATCHER.search(query) is not None


def wake_unseen(dep: ObservedDeployment) -> ScaleDecision | None:
    """A Deployment at zero replicas whose rate query answered with no series (the caller's reading; an unreadable
    Prometheus is not such an answer): its traffic is unknown, not zero, and a query that needs its pods would stay
    empty for good, so it is woken to one replica (at most ``max_replicas``; reason :data:`NO_SIGNAL_AT_ZERO`): then
    its pods' series exist, or its traffic is seen. None for a Deployment not at zero or not declaring serving."""
    if dep.serving is None or dep.replicas != 0:
        return None
    up = min(1, dep.serving.scaling.max_replicas)
    return ScaleDecision(dep.namespace, dep.name, 0, up, NO_SIGNAL_AT_ZERO) if up > 0 else None
