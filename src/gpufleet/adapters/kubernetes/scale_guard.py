"""Who else scales a Deployment: the reads and audit records of the checks replica scaling makes before it acts
(adapters/kubernetes/scaling.py).

The decisions are in ``control/scale_ownership.py`` (pure): leave alone a Deployment annotated
``gpufleet.io/managed: "false"`` (reason ``not_managed``) or one an HPA targets (reason ``hpa_manages``, with the
HPA's name), hold one someone else scaled since gpufleet's last write (reason ``scaled_by_other``, with ``wrote`` and
``replicas_now``: their count stands :data:`~gpufleet.control.scale_ownership.HOLD_S`, doubled each time it happens
again without a write of gpufleet's surviving in between, at most
:data:`~gpufleet.control.scale_ownership.HOLD_MAX_S`), and never take to zero a Deployment whose rate nothing would
see after (reason ``no_wake_signal``), nor leave one at zero whose rate query answers nothing there (reason
``no_signal_at_zero``: woken to one replica). Here: the HPAs are listed once a scale period (autoscaling/v1), a
Deployment's rate is said to come from its own pods when its query (``gpufleet.io/rps-query``, else the controller's)
selects series by pod (``reads_pods``) or answered nothing at zero replicas before (remembered per query, audited
``scale_query`` ``no_signal_at_zero`` ``warning``: write a rate that outlives the pods, a gateway's counter, to scale
to zero), and each Deployment left alone is audited (action ``scale``, outcome ``skipped``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpufleet.adapters.kubernetes.rest import ApiError, Kube
from gpufleet.adapters.kubernetes.workloads import rps_query
from gpufleet.control.observation import ObservedDeployment
from gpufleet.control.replicas import ScaleDecision
from gpufleet.control.scale_ownership import (
    NO_SIGNAL_AT_ZERO,
    HandsOff,
    Key,
    ScaleOwnership,
    left_alone,
    reads_pods,
    wake_floor,
    wake_unseen,
)


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
        self._silent: set[tuple[str, str, str]] = set()  # (namespace, name, query): answered nothing at zero

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
        """``d``, with a decision of 0 lifted to 1 when ``dep``'s rate is read from its own pods: its query selects
        series by pod, or it answered nothing at zero replicas before (:meth:`silent_at_zero`)."""
        if dep is None or dep.serving is None:
            return d
        query = rps_query(dep, self.default_rps_query)
        own_pods = reads_pods(query) or (dep.namespace, dep.name, query) in self._silent
        return wake_floor(d, own_pods, dep.serving.scaling.max_replicas)

    def silent_at_zero(self, dep: ObservedDeployment) -> ScaleDecision | None:
        """For ``dep`` whose rate query answered with no series: at zero replicas, the decision to wake it
        (``wake_unseen``), its query remembered as one that needs the pods (never taken to zero again by
        :meth:`woken`) and a warning audited; None otherwise."""
        d = wake_unseen(dep)
        if d is None:
            return None
        query = rps_query(dep, self.default_rps_query)
        self._silent.add((dep.namespace, dep.name, query))
        self.record("scale_query", f"{dep.namespace}/{dep.name}", NO_SIGNAL_AT_ZERO, "warning", query=query,
                    hint="the rate query has no series at zero replicas; give a rate that outlives the pods "
                    "(a gateway's counter) in gpufleet.io/rps-query to scale to zero")  # fmt: skip
        return d

    def _audit(self, off: Sequence[HandsOff]) -> None:
        for h in off:
            self.record("scale", h.target, h.reason, "skipped", **h.extra)
