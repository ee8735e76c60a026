"""Who else scales a Deployment: the checks replica scaling makes before it acts (adapters/kubernetes/scaling.py).

gpufleet writes one field, ``spec.replicas`` (through the scale subresource), and so may others: an
HorizontalPodAutoscaler, a human's ``kubectl scale``, a GitOps sync. Two writers of one field undo each other every
period (flapping), so replica scaling leaves a Deployment alone, and says so in the audit (action ``scale``, outcome
``skipped``), when:

- it is annotated ``gpufleet.io/managed: "false"`` (reason ``not_managed``);
- an HPA targets it (reason ``hpa_manages``, with the HPA's name; HPAs are listed once a scale period, autoscaling/v1);
- its replicas are not those gpufleet last wrote (reason ``scaled_by_other``, with ``wrote`` and ``replicas_now``):
  someone else scaled it, and their count stands for :data:`HOLD_S`, doubled each time it happens again without a
  write of gpufleet's surviving in between (at most :data:`HOLD_MAX_S`); its policy keeps learning meanwhile.

And it never takes a Deployment to zero when nothing would see its first request after: its rate read from its own
pods (the default query, :data:`~gpufleet.adapters.kubernetes.workloads.DEFAULT_RPS_QUERY`, and no
``gpufleet.io/rps-query``) has no series once no pod runs, so a decision of 0 is lifted to 1 (reason
``no_wake_signal``). A rate that outlives the pods (a gateway's or a queue's counter) lets zero stand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpufleet.adapters.kubernetes.rest import ApiError, Kube
from gpufleet.adapters.kubernetes.workloads import DEFAULT_RPS_QUERY
from gpufleet.control.observation import ObservedDeployment
from gpufleet.control.replicas import ScaleDecision

Key = tuple[str, str]
HOLD_S = 600.0  # someone else's scale stands this long
HOLD_MAX_S = 3600.0  # ... doubled on each recurrence, up to this
NO_WAKE_SIGNAL = "no_wake_signal"


@dataclass(frozen=True, slots=True)
class HandsOff:
    reason: str  # not_managed, hpa_manages, scaled_by_other
    extra: dict[str, object]


class ScaleGuard:
    """The writes gpufleet made and the holds it keeps, per Deployment (one per controller, on the scaling worker)."""

    def __init__(self, kube: Kube, record: Callable[..., object], default_rps_query: str) -> None:
        self.kube = kube
        self.record = record
        self.default_rps_query = default_rps_query
        self.wrote: dict[Key, int] = {}  # replicas gpufleet last wrote, until someone else's change is seen
        self._held: dict[Key, float] = {}  # until when someone else's scale stands
        self._strikes: dict[Key, int] = {}
        self._hpas: dict[Key, str] = {}

    def read_hpas(self) -> None:
        """The HPAs' Deployment targets (once a period); an unreadable list keeps the last one read."""
        try:
            got = self.kube.get("/apis/autoscaling/v1/horizontalpodautoscalers")
        except ApiError as exc:
            self.record("scale_round", "horizontalpodautoscalers", "hpa_unreadable", "error", status=exc.status)
            return
        hpas: dict[Key, str] = {}
        for h in got.get("items") or []:
            meta, ref = h.get("metadata") or {}, (h.get("spec") or {}).get("scaleTargetRef") or {}
            if ref.get("kind") == "Deployment" and str(ref.get("apiVersion", "apps/v1")).startswith("apps/"):
                hpas[(str(meta.get("namespace", "")), str(ref.get("name", "")))] = str(meta.get("name", ""))
        self._hpas = hpas

    def owned_elsewhere(
        self, deployments: Sequence[ObservedDeployment], *, audit: bool = True
    ) -> list[ObservedDeployment]:
        """``deployments`` without those not managed or scaled by an HPA (each such one audited when ``audit``):
        these are not read nor decided."""
        out: list[ObservedDeployment] = []
        for dep in deployments:
            key = (dep.namespace, dep.name)
            if dep.serving is not None and not dep.serving.managed:
                if audit:
                    self.record("scale", f"{dep.namespace}/{dep.name}", "not_managed", "skipped")
            elif dep.serving is not None and key in self._hpas:
                if audit:
                    self.record("scale", f"{dep.namespace}/{dep.name}", "hpa_manages", "skipped", hpa=self._hpas[key])
            else:
                out.append(dep)
        return out

    def held(self, deployments: Sequence[ObservedDeployment], now: float, *, period: bool) -> set[Key]:
        """The Deployments whose replicas someone else set (seen now, or still in their hold); at a ``period``
        (not the fast path) a change is detected and the holds are audited."""
        out: set[Key] = set()
        for dep in deployments:
            key = (dep.namespace, dep.name)
            target = f"{dep.namespace}/{dep.name}"
            wrote = self.wrote.get(key)
            if wrote is not None and dep.replicas != wrote and period:
                strikes = self._strikes.get(key, 0)
                until = now + min(HOLD_S * 2**strikes, HOLD_MAX_S)
                self._held[key], self._strikes[key] = until, strikes + 1
                del self.wrote[key]
                self.record("scale", target, "scaled_by_other", "skipped", wrote=wrote, replicas_now=dep.replicas,
                            held_until=round(until, 3))  # fmt: skip
                out.add(key)
                continue
            if wrote is not None and dep.replicas == wrote and period:
                self._strikes.pop(key, None)  # gpufleet's last write stood
            until = self._held.get(key)
            if until is None:
                continue
            if now >= until:
                del self._held[key]
                continue
            out.add(key)
            if period:
                self.record("scale", target, "scaled_by_other", "skipped", replicas_now=dep.replicas,
                            held_until=round(until, 3))  # fmt: skip
        return out

    def woken(self, d: ScaleDecision, dep: ObservedDeployment | None) -> ScaleDecision:
        """``d``, with a decision of 0 lifted to 1 when ``dep``'s rate is read from its own pods."""
        if d.desired != 0 or dep is None or dep.serving is None:
            return d
        if dep.serving.rps_query or self.default_rps_query != DEFAULT_RPS_QUERY:
            return d
        return replace(d, desired=min(1, dep.serving.scaling.max_replicas), reason=NO_WAKE_SIGNAL)
