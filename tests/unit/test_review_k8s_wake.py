"""Review (k8s): which request-rate queries read a Deployment's own pods, and a Deployment at zero whose query
answers nothing (control/scale_ownership.py, adapters/kubernetes/scale_guard.py)."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.kubernetes.scale_guard import ScaleGuard
from gpufleet.adapters.kubernetes.workloads import DEFAULT_RPS_QUERY
from gpufleet.control.observation import DeclaredServing, ObservedDeployment
from gpufleet.control.replicas import ScaleDecision
from gpufleet.control.scale_ownership import NO_SIGNAL_AT_ZERO, NO_WAKE_SIGNAL, reads_pods, wake_unseen
from gpufleet.domain.workloads import ServingScaling


def _dep(replicas: int, query: str = "", max_replicas: int = 4) -> ObservedDeployment:
    declared = DeclaredServing(ServingScaling(0, max_replicas, 10.0), rps_query=query)
    return ObservedDeployment("ns", "web", replicas, replicas, "serving", serving=declared)


def test_queries_that_select_by_pod_read_the_pods() -> None:
    """Review (fixed), the defect: only the built-in default query counted as read from the Deployment's own pods;
    any ``gpufleet.io/rps-query`` (or ``--rps-query``) was trusted to outlive them, a pod-scoped one too, and the
    Deployment was taken to zero for good. Now a query with a ``pod`` matcher reads the pods."""
    assert reads_pods(DEFAULT_RPS_QUERY)
    assert reads_pods('sum(rate(http_requests_total{namespace="$namespace",pod=~"$deployment-.+"}[1m])) or vector(0)')
    assert reads_pods('sum(rate(x{ pod_name = "a" }[1m]))') and reads_pods(
        "sum(rate(x{kubernetes_pod_name=~'a.*'}[1m]))"
    )
    assert not reads_pods('sum(rate(gateway_requests_total{namespace="$namespace",backend="$deployment"}[2m]))')
    assert not reads_pods('sum by (pod) (rate(gateway_requests_total{service="$deployment"}[2m]))')


def test_a_deployment_at_zero_with_no_series_is_woken_once_and_not_taken_to_zero_again() -> None:
    """Review (fixed), the defect: a Deployment at zero whose rate query answered with no series (a query by its
    pods' labels that gpufleet cannot recognise) was ``no_rate`` every period: left at zero, never woken. Now it is
    woken to one replica (``no_signal_at_zero``, a warning audited with the query) and its query is remembered as
    one that needs the pods: the policy's next 0 is lifted to 1 (``no_wake_signal``)."""
    records: list[tuple[Any, ...]] = []
    guard = ScaleGuard(None, lambda *a, **kw: records.append((*a, kw)), DEFAULT_RPS_QUERY)  # type: ignore[arg-type]
    query = 'sum(rate(x{app="$deployment"}[2m]))'
    assert wake_unseen(_dep(2, query)) is None and wake_unseen(_dep(0, query, max_replicas=0)) is None
    to_zero = ScaleDecision("ns", "web", 1, 0, "forecast")
    assert guard.woken(to_zero, _dep(1, query)) == to_zero  # not known to need its pods: zero stands
    woke = guard.silent_at_zero(_dep(0, query))
    assert woke == ScaleDecision("ns", "web", 0, 1, NO_SIGNAL_AT_ZERO)
    assert [(r[0], r[2], r[3], r[4]["query"]) for r in records] == [
        ("scale_query", NO_SIGNAL_AT_ZERO, "warning", 'sum(rate(x{app="web"}[2m]))')
    ]
    assert guard.woken(to_zero, _dep(1, query)).desired == 1
    assert guard.woken(to_zero, _dep(1, query)).reason == NO_WAKE_SIGNAL
    # a query changed since (the annotation rewritten): judged afresh
    assert guard.woken(to_zero, _dep(1, 'sum(rate(gw{backend="$deployment"}[2m]))')) == to_zero
