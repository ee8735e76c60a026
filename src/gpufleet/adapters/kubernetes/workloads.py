"""Acting on Deployments: replica scaling, rightsizing apply/rollback.

Scaling patches the Deployment's ``spec.replicas`` with gpufleet's record of the write (``Actuator.scale``), so an HPA-free Deployment follows gpufleet's
replica policy; gpufleet emits no HPA/KEDA object (their reactive rules would fight the predictive policy).
Rightsizing apply patches the containers' requests in the pod template and keeps the old requests (JSON)
in the annotation ``gpufleet.io/rightsizing-previous``; rollback restores them and removes the annotation.
Both go through the :class:`Actuator` (dry-run, audit). Before a scale-down, :func:`order_replicas` writes each
replica's ``controller.kubernetes.io/pod-deletion-cost`` so that the ReplicaSet controller stops the replicas on the
dearest nodes first (gpufleet's scale-down rule, the simulator's; honoured by Kubernetes 1.22+, beta on by default).

:func:`deployment_rates` observes the request rate of every opted-in Deployment (adapters/kubernetes/deployment_json.py)
from Prometheus: its ``gpufleet.io/rps-query`` annotation or the controller's default query, with ``$namespace``
and ``$deployment`` substituted (escaped for the regex inside a ``=~`` / ``!~`` matcher: a name may hold dots), summed
over the series it matches at the decision time.
:func:`deployment_gauges` reads the requests waiting and in service the same way (``gpufleet.io/queue-query``,
``gpufleet.io/running-query``; vLLM's scheduler gauges by default) and, when a query is given, the requests
whose queue wait passed the SLO over the last period (``gpufleet.io/slo-miss-query``): the queue, in-flight and
SLO-miss signals the simulator's gateway gives the same policy.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from string import Template
from typing import Literal

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.deployment_json import deployment_from_json
from gpufleet.adapters.kubernetes.rest import ApiError, Kube
from gpufleet.adapters.telemetry_prometheus import (
    DeadlinePassed,
    PrometheusTelemetry,
    TelemetryUnavailable,
    re2_escape,
)
from gpufleet.control.observation import Observation, ObservedDeployment, ObservedNode
from gpufleet.control.replica_victims import DELETION_COST, REASON_DELETION_COST, deletion_cost_plan
from gpufleet.control.replicas import ScaleDecision, ServingGauges
from gpufleet.domain.errors import ValidationError

A_PREVIOUS = "gpufleet.io/rightsizing-previous"
# The Deployment's pods: <deployment>-<template hash>-<id> (or <deployment>-<hash cut short><id> where the name is
# long); not "$deployment-.*", which also matched the pods of Deployment web-canary for Deployment web
PODS_OF_DEPLOYMENT = 'namespace="$namespace",pod=~"$deployment-[a-z0-9]+(-[a-z0-9]+)?"'
# vLLM's finished-request counter over the Deployment's pods
DEFAULT_RPS_QUERY = f"sum(rate(vllm:request_success_total{{{PODS_OF_DEPLOYMENT}}}[2m]))"
# vLLM's scheduler gauges: requests waiting for a batch slot, and requests being served
DEFAULT_QUEUE_QUERY = f"sum(vllm:num_requests_waiting{{{PODS_OF_DEPLOYMENT}}})"
DEFAULT_RUNNING_QUERY = f"sum(vllm:num_requests_running{{{PODS_OF_DEPLOYMENT}}})"


# a regex matcher's string literal (=~ or !~): "..." or '...' with escapes, or `...` raw
_REGEX_LITERAL = re.compile(r"""([=!]~\s*)("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)""")


def _promql(dep: ObservedDeployment, own: str, default: str) -> str:
    """``$namespace`` and ``$deployment`` substituted; inside a regex matcher's literal (``pod=~"$deployment-..."``)
    with the regex metacharacters escaped (a Deployment name may hold dots: ``api.v1`` must not match ``api-v1``),
    elsewhere (``deployment="$deployment"``) as they are."""
    names = {"namespace": dep.namespace, "deployment": dep.name}

    def in_regex(m: re.Match[str]) -> str:
        literal = m.group(2)
        escaped = {k: re2_escape(v) for k, v in names.items()}
        if literal[0] != "`":  # a quoted PromQL string: its backslashes are escapes themselves
            escaped = {k: v.replace("\\", "\\\\") for k, v in escaped.items()}
        return m.group(1) + Template(literal).safe_substitute(escaped)

    return Template(_REGEX_LITERAL.sub(in_regex, own or default)).safe_substitute(names)


def rps_query(dep: ObservedDeployment, default: str) -> str:
    """The PromQL for ``dep``'s request rate (its annotation, else ``default``) with its namespace and name."""
    return _promql(dep, dep.serving.rps_query if dep.serving is not None else "", default)


GAUGES = ("queue", "running", "slo_misses")


def gauge_queries(dep: ObservedDeployment, defaults: Mapping[str, str]) -> dict[str, str]:
    """The PromQL of each of :data:`GAUGES` for ``dep`` (its annotation, else ``defaults[name]``; ``""``: not
    read; every one ``""`` when ``dep`` declares no serving)."""
    s = dep.serving
    if s is None:
        return dict.fromkeys(GAUGES, "")
    own = {"queue": s.queue_query, "running": s.running_query, "slo_misses": s.slo_miss_query}
    return {name: _promql(dep, own[name], defaults.get(name, "")) for name in GAUGES}


def deployment_gauges(
    prom: PrometheusTelemetry,
    deployments: Sequence[ObservedDeployment],
    at_s: float,
    defaults: Mapping[str, str],
    deadline: float | None = None,
) -> ServingGauges:
    """Per opted-in Deployment at ``at_s``, each of :data:`GAUGES`: its requests waiting, its requests in service
    and its requests whose queue wait passed the SLO over the last period. The query is the Deployment's
    annotation, else ``defaults[name]``; an empty one is not read. A Deployment whose query matches no series or
    cannot be read (or is not read by ``deadline``, a ``time.monotonic()`` instant) is left out of that map: the
    policy then sees no queue and no misses, never made-up ones."""
    out: dict[str, dict[tuple[str, str], float]] = {name: {} for name in GAUGES}
    for dep in deployments:
        for name, query in gauge_queries(dep, defaults).items():
            if not query:
                continue
            try:
                v = prom.sum_at(query, at_s, deadline=deadline)
            except TelemetryUnavailable:
                continue
            if v is not None:
                out[name][(dep.namespace, dep.name)] = v
    return ServingGauges(out["queue"], out["running"], out["slo_misses"])


ROUND_DEADLINE = "round_deadline"  # deployment_rates' error for a Deployment its deadline left unread


def deployment_rates(
    prom: PrometheusTelemetry,
    deployments: Sequence[ObservedDeployment],
    at_s: float,
    default_query: str,
    deadline: float | None = None,
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], str]]:
    """Request rate per opted-in Deployment at ``at_s``, and the ones Prometheus could not answer (with why:
    :data:`ROUND_DEADLINE` for those not read by ``deadline``, a ``time.monotonic()`` instant). A query that matches
    no series gives no rate (no data is not zero traffic)."""
    rates: dict[tuple[str, str], float] = {}
    errors: dict[tuple[str, str], str] = {}
    for dep in deployments:
        if dep.serving is None:
            continue
        key = (dep.namespace, dep.name)
        try:
            v = prom.sum_at(rps_query(dep, default_query), at_s, deadline=deadline)
        except DeadlinePassed:
            errors[key] = ROUND_DEADLINE
            continue
        except TelemetryUnavailable as exc:
            errors[key] = str(exc)
            continue
        if v is not None:
            rates[key] = v
    return rates, errors


def apply_scale(act: Actuator, d: ScaleDecision, recorded: int | Literal["unknown"] | None = "unknown") -> str:
    """Apply ``d`` (``Actuator.scale``). A decision that changes nothing writes nothing, unless ``recorded`` (the
    replicas of gpufleet's record on the Deployment, ``ObservedDeployment.scaled_replicas``; pass the decision's
    ``"unknown"`` when it was not read) is not them: then the record is brought up to the replicas gpufleet now keeps
    (outcome ``recorded``), so that a later leader does not take them for someone else's."""
    if not d.changed:
        if recorded not in ("unknown", d.current) and not act.dry_run:
            return act.scale(d.namespace, d.name, d.current, d.reason, expect=d.current, record_only=True)
        act.record("scale", f"{d.namespace}/{d.name}", d.reason, "unchanged", replicas=d.current)
        return "unchanged"
    return act.scale(d.namespace, d.name, d.desired, d.reason, expect=d.current)


def read_own_writes(
    kube: Kube, deployments: Sequence[ObservedDeployment], written: dict[tuple[str, str], int]
) -> list[ObservedDeployment]:
    """The view's informer can lag the controller's own scale writes by a few milliseconds to seconds; a policy
    handed the replica count from before its own write would decide again from the old fleet (and scale the new one
    down). ``written`` maps (namespace, name) to the replicas this controller last wrote; a Deployment whose observed
    replicas differ is read again from the API server, which is authoritative (someone else's later change is then
    what the policy sees). ``written`` is emptied: each write is checked once, and a failed read keeps the view's
    object (the view has caught up long before the next period)."""
    out: list[ObservedDeployment] = []
    for dep in deployments:
        want = written.get((dep.namespace, dep.name))
        if want is not None and dep.replicas != want:
            with contextlib.suppress(ApiError, ValidationError):
                dep = deployment_from_json(kube.get(f"/apis/apps/v1/namespaces/{dep.namespace}/deployments/{dep.name}"))
        out.append(dep)
    written.clear()
    return out


def order_replicas(
    act: Actuator, obs: Observation, namespace: str, name: str, price: Callable[[ObservedNode], tuple[float, bool]]
) -> int:
    """Write the pod-deletion-cost of Deployment ``namespace/name``'s replicas that
    :func:`~gpufleet.control.replica_victims.deletion_cost_plan` changes; returns how many it wrote."""
    plan = deletion_cost_plan(obs, namespace, name, price)
    for c in plan:
        act.annotate_pod(c.namespace, c.pod, {DELETION_COST: str(c.cost)}, REASON_DELETION_COST)
    return len(plan)


def _requests(dep: dict[str, object]) -> dict[str, dict[str, str]]:
    containers = dep["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
    return {c["name"]: dict((c.get("resources") or {}).get("requests") or {}) for c in containers}


def apply_rightsizing(
    act: Actuator, namespace: str, name: str, requests: dict[str, dict[str, str]], reason: str
) -> str:
    """Set ``requests`` (container -> resource -> quantity); remembers the previous requests for rollback."""
    dep = act.kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
    old = _requests(dep)
    unknown = sorted(set(requests) - set(old))
    if unknown:
        raise ValidationError("requests", f"{namespace}/{name} has no container(s) {', '.join(unknown)}")
    return act.patch_requests(namespace, name, requests, json.dumps(old, sort_keys=True), reason)


def rollback_rightsizing(act: Actuator, namespace: str, name: str) -> str:
    """Restore the requests saved by :func:`apply_rightsizing`; ``nothing_to_roll_back`` if none were."""
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
    dep = act.kube.get(path)
    prev = (dep["metadata"].get("annotations") or {}).get(A_PREVIOUS)
    if not prev:
        act.record("rollback_requests", f"{namespace}/{name}", "rightsizing_rollback", "nothing_to_roll_back")
        return "nothing_to_roll_back"
    old: dict[str, dict[str, str]] = json.loads(prev)
    cur = _requests(dep)
    containers = []
    for c, reqs in sorted(old.items()):
        # strategic merge keeps keys absent from the patch: null out resources rightsizing added
        merged: dict[str, str | None] = {k: None for k in cur.get(c, {}) if k not in reqs}
        merged.update(reqs)
        containers.append({"name": c, "resources": {"requests": merged}})
    body = {"metadata": {"annotations": {A_PREVIOUS: None}}, "spec": {"template": {"spec": {"containers": containers}}}}
    return act.merge_patch_strategic(path, body, f"{namespace}/{name}")
