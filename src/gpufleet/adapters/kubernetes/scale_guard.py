"""Who else scales a Deployment: the reads and audit records of the checks replica scaling makes before it acts
(adapters/kubernetes/scaling.py).

The decisions are in ``control/scale_ownership.py`` (pure): leave alone a Deployment annotated
``gpufleet.io/managed: "false"`` (reason ``not_managed``) or one an HPA targets (reason ``hpa_manages``, with the
HPA's name), hold one someone else scaled since gpufleet's last write (reason ``scaled_by_other``, with ``wrote`` and
``replicas_now``: their count stands :data:`~gpufleet.control.scale_ownership.HOLD_S`, doubled each time it happens
again without a write of gpufleet's surviving in between, at most
:data:`~gpufleet.control.scale_ownership.HOLD_MAX_S`), and never take to zero a Deployment whose rate nothing would
see after (reason ``no_wake_signal``). Here: the HPAs are listed once a scale period (autoscaling/v1), a Deployment's
rate is said to come from its own pods when it is read with the default query
(:data:`~gpufleet.adapters.kubernetes.workloads.DEFAULT_RPS_QUERY`) and no ``gpufleet.io/rps-query``, and each
Deployment left alone is audited (action ``scale``, outcome ``skipped``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpufleet.adapters.kubernetes.rest import ApiError, Kube
from gpufleet.adapters.kubernetes.workloads import DEFAULT_RPS_QUERY
from gpufleet.control.observation import ObservedDeployment
from gpufleet.control.replicas import ScaleDecision
from gpufleet.control.scale_ownership import HandsOff, Key, ScaleOwnership, left_alone, wake_floor


class ScaleGuard:
    """The HPAs last read and the audit of who else scales each Deployment; the writes gpufleet made and the holds
    it keeps are its :class:`~gpufleet.control.scale_ownership.ScaleOwnership` (one per controller, on the scaling
    worker)."""

    def __init__(self, kube: Kube, record: Callable[..., object], default_rps_query: str) -> None:
        self.kube = kube
        self.record = record
        self.default_rps_query = default_rps_query
        self.ownership = ScaleOwnership()
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
        kept, off = left_alone(deployments, self._hpas)
        if audit:
            self._audit(off)
        return kept

    def held(self, deployments: Sequence[ObservedDeployment], now: float, *, period: bool) -> set[Key]:
        """The Deployments whose replicas someone else set (seen now, or still in their hold); at a ``period``
        (not the fast path) a change is detected and the holds are audited."""
        holds = self.ownership.held(deployments, now, period=period)
        self._audit(holds.audit)
        return holds.keys

    def woken(self, d: ScaleDecision, dep: ObservedDeployment | None) -> ScaleDecision:
        """``d``, with a decision of 0 lifted to 1 when ``dep``'s rate is read from its own pods."""
        if dep is None or dep.serving is None:
            return d
        own_pods = not dep.serving.rps_query and self.default_rps_query == DEFAULT_RPS_QUERY
        return wake_floor(d, own_pods, dep.serving.scaling.max_replicas)

    def _audit(self, off: Sequence[HandsOff]) -> None:
        for h in off:
            self.record("scale", h.target, h.reason, "skipped", **h.extra)
