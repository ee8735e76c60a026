"""Deployments (JSON) -> :class:`ObservedDeployment`: the replica policy's annotations and gpufleet's scale record.

Deployments opt in to gpufleet's replica policy with annotations (:class:`DeclaredServing`):
``gpufleet.io/target-rps`` (requests/s one replica sustains at its SLO; required), ``gpufleet.io/max-replicas``
(required with it; at most 2**31 - 1, what ``spec.replicas`` holds), ``gpufleet.io/min-replicas`` (default 1; 0 allows scale to zero),
``gpufleet.io/cold-start-s`` (default 210), ``gpufleet.io/scale-down-delay-s`` (default 300),
``gpufleet.io/budget-usd-day``, ``gpufleet.io/slo-s``, ``gpufleet.io/max-concurrency`` (requests one replica
serves at once; none: batching), ``gpufleet.io/rps-query`` (PromQL for the Deployment's request rate; default:
the controller's ``--rps-query``), ``gpufleet.io/queue-query`` and ``gpufleet.io/running-query`` (its requests
waiting and in service now; defaults: ``--queue-query``, ``--running-query``) and ``gpufleet.io/slo-miss-query``
(its requests whose queue wait passed the SLO over the last period; default ``--slo-miss-query``, none). GPUs
per replica: the pod template's ``nvidia.com/gpu`` requests; its product: the template's ``nodeSelector``
``nvidia.com/gpu.product`` (the replica's price from the catalog).

gpufleet's scale record: each scale write of gpufleet's (``Actuator.scale``) sets, in the same update as
``spec.replicas``, the annotation ``gpufleet.io/scaled-replicas: "<replicas>@<RFC 3339 UTC>"`` (:func:`scale_record`),
read back as ``ObservedDeployment.scaled_replicas`` (:func:`recorded_replicas`; absent or unreadable: None). It is
what a leader with no memory of its own writes (a failover, a restart, a Lease regained) compares the replicas with:
replicas other than those recorded are someone else's scale, held (``control/scale_ownership.py``). Anyone who may
edit the Deployment may edit this annotation too, as they may its replicas: the record is trusted as much as the
replica count itself, no more (a forged record can make someone's scale look like gpufleet's, which anyone who can
scale the Deployment can get anyway, or gpufleet's look like someone's, which only holds it a while).
"""

from __future__ import annotations

import math
import time
from typing import Any

from gpufleet.adapters.kubernetes.labels import GPU, L_KIND, L_PRODUCT, MAX_REPLICAS, parse_quantity
from gpufleet.control.observation import DeclaredServing, ObservedDeployment
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.workloads import ServingScaling

# replica scaling of a Deployment (opt in with target-rps; see the module docstring)
A_TARGET_RPS = "gpufleet.io/target-rps"
A_MIN_REPLICAS = "gpufleet.io/min-replicas"
A_MAX_REPLICAS = "gpufleet.io/max-replicas"
A_COLD_START = "gpufleet.io/cold-start-s"
A_SCALE_DOWN_DELAY = "gpufleet.io/scale-down-delay-s"
A_BUDGET = "gpufleet.io/budget-usd-day"
A_SLO = "gpufleet.io/slo-s"
A_MAX_CONCURRENCY = "gpufleet.io/max-concurrency"
A_RPS_QUERY = "gpufleet.io/rps-query"
A_QUEUE_QUERY = "gpufleet.io/queue-query"
A_RUNNING_QUERY = "gpufleet.io/running-query"
A_SLO_MISS_QUERY = "gpufleet.io/slo-miss-query"
A_MANAGED = "gpufleet.io/managed"  # "false": an opted-in Deployment gpufleet's replica scaling leaves alone

A_SCALED_REPLICAS = "gpufleet.io/scaled-replicas"  # gpufleet's last scale write: "<replicas>@<RFC 3339 UTC>"


def scale_record(replicas: int, at_s: float) -> str:
    """The value of :data:`A_SCALED_REPLICAS` for a write of ``replicas`` at ``at_s`` (Unix seconds)."""
    return f"{replicas}@{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(at_s))}"


def recorded_replicas(annotations: dict[str, Any]) -> int | None:
    """The replicas of gpufleet's scale record in ``annotations``; None when absent or unreadable (no evidence)."""
    raw = annotations.get(A_SCALED_REPLICAS)
    if not isinstance(raw, str):
        return None
    head = raw.split("@", 1)[0].strip()
    if not head.isdigit():
        return None
    n = int(head)
    return n if n <= MAX_REPLICAS else None


def deployment_from_json(obj: dict[str, Any]) -> ObservedDeployment:
    meta = obj.get("metadata", {})
    containers = obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    reqs = tuple(
        (
            str(c.get("name", "")),
            tuple(sorted((k, str(v)) for k, v in ((c.get("resources") or {}).get("requests") or {}).items())),
        )
        for c in containers
    )
    return ObservedDeployment(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        replicas=int(obj.get("spec", {}).get("replicas", 1) or 0),
        ready_replicas=int(obj.get("status", {}).get("readyReplicas", 0) or 0),
        kind=(meta.get("labels") or {}).get(L_KIND, ""),
        requests=reqs,
        serving=declared_serving(obj),
        scaled_replicas=recorded_replicas(meta.get("annotations") or {}),
    )


def _number(ann: dict[str, str], key: str, where: str, *, integer: bool, low: float, default: float | None) -> float:
    raw = ann.get(key)
    if raw is None:
        if default is None:
            raise ValidationError(f"{where}[{key}]", f"required with {A_TARGET_RPS}")
        return default
    try:
        v = float(str(raw).strip())
    except ValueError:
        raise ValidationError(f"{where}[{key}]", f"not a number: {raw!r}") from None
    if not math.isfinite(v) or v < low or (integer and v != int(v)):
        kind = "an integer" if integer else "a number"
        raise ValidationError(f"{where}[{key}]", f"must be {kind} >= {low:g}, got {raw!r}")
    return v


def declared_serving(obj: dict[str, Any]) -> DeclaredServing | None:
    """What a Deployment declares for gpufleet's replica policy (module docstring), None without ``target-rps``."""
    meta = obj.get("metadata", {})
    ann: dict[str, str] = meta.get("annotations") or {}
    if A_TARGET_RPS not in ann:
        return None
    where = f"deployment[{meta.get('namespace', '')}/{meta.get('name', '')}].metadata.annotations"
    target = _number(ann, A_TARGET_RPS, where, integer=False, low=0.0, default=None)
    if target <= 0:
        raise ValidationError(f"{where}[{A_TARGET_RPS}]", f"must be > 0, got {ann[A_TARGET_RPS]!r}")
    hi = int(_number(ann, A_MAX_REPLICAS, where, integer=True, low=1, default=None))
    if hi > MAX_REPLICAS:  # a clamp to it would be written to spec.replicas, an int32
        raise ValidationError(f"{where}[{A_MAX_REPLICAS}]", f"must be <= {MAX_REPLICAS}, got {ann[A_MAX_REPLICAS]!r}")
    lo = int(_number(ann, A_MIN_REPLICAS, where, integer=True, low=0, default=1))
    if lo > hi:
        raise ValidationError(f"{where}[{A_MIN_REPLICAS}]", f"{lo} is above {A_MAX_REPLICAS} {hi}")
    cold = int(_number(ann, A_COLD_START, where, integer=True, low=0, default=210))
    down = int(_number(ann, A_SCALE_DOWN_DELAY, where, integer=True, low=0, default=300))
    budget = _number(ann, A_BUDGET, where, integer=False, low=0, default=-1.0)
    slo = _number(ann, A_SLO, where, integer=False, low=0, default=-1.0)
    conc = int(_number(ann, A_MAX_CONCURRENCY, where, integer=True, low=1, default=0))
    tmpl = obj.get("spec", {}).get("template", {}).get("spec", {})
    gpus = 0
    for i, c in enumerate(tmpl.get("containers") or []):
        res = c.get("resources") or {}
        raw = (res.get("requests") or {}).get(GPU, (res.get("limits") or {}).get(GPU, 0))
        gpus += int(parse_quantity(raw, f"{where.removesuffix('.metadata.annotations')}.containers[{i}].{GPU}"))
    return DeclaredServing(
        scaling=ServingScaling(lo, hi, target, cold, down, budget if budget >= 0 else None),
        gpus_per_replica=gpus,
        gpu_product=str((tmpl.get("nodeSelector") or {}).get(L_PRODUCT, "")),
        slo_s=slo if slo > 0 else None,
        max_concurrency=conc or None,
        rps_query=str(ann.get(A_RPS_QUERY, "")).strip(),
        queue_query=str(ann.get(A_QUEUE_QUERY, "")).strip(),
        running_query=str(ann.get(A_RUNNING_QUERY, "")).strip(),
        slo_miss_query=str(ann.get(A_SLO_MISS_QUERY, "")).strip(),
        managed=_managed(ann, where),
    )


def _managed(ann: dict[str, str], where: str) -> bool:
    raw = str(ann.get(A_MANAGED, "true")).strip().lower()
    if raw not in ("true", "false"):
        raise ValidationError(f"{where}[{A_MANAGED}]", f'must be "true" or "false", got {ann[A_MANAGED]!r}')
    return raw == "true"
