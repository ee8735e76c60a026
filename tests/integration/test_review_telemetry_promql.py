"""Review (hostile): the PromQL the controller builds from a Deployment's name (adapters/kubernetes/workloads.py,
the default ``--rps-query`` / ``--queue-query`` / ``--running-query``) against a real Prometheus."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.adapters.kubernetes.workloads import (
    DEFAULT_QUEUE_QUERY,
    DEFAULT_RPS_QUERY,
    DEFAULT_RUNNING_QUERY,
    deployment_gauges,
    deployment_rates,
)
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry
from gpufleet.control.observation import DeclaredServing, ObservedDeployment
from gpufleet.domain.workloads import ServingScaling
from tests.integration import promserver

T0 = 1_764_547_200
SPAN_S = 1800
SCRAPE_S = 15
# pod -> (requests/s, requests waiting): the pods of Deployment "web" and of Deployment "web-canary" in one namespace
PODS = {"web-5d8f7c9b4-x2k7p": (10.0, 3), "web-canary-6f9d8c7b5-q8w4z": (90.0, 40)}


def _openmetrics() -> str:
    lines = ["# TYPE vllm:request_success_total counter"]
    for pod, (rps, _) in PODS.items():
        for k in range(SPAN_S // SCRAPE_S + 1):
            lines.append(f'vllm:request_success_total{{namespace="ml",pod="{pod}"}} {rps * k * SCRAPE_S} '
                         f"{T0 + k * SCRAPE_S}")  # fmt: skip
    for gauge in ("vllm:num_requests_waiting", "vllm:num_requests_running"):
        lines.append(f"# TYPE {gauge} gauge")
        for pod, (_, waiting) in PODS.items():
            for k in range(SPAN_S // SCRAPE_S + 1):
                lines.append(f'{gauge}{{namespace="ml",pod="{pod}"}} {waiting} {T0 + k * SCRAPE_S}')
    return "\n".join([*lines, "# EOF", ""])


@pytest.mark.skipif(not promserver.available(), reason=promserver.SKIP_REASON)
def test_a_deployments_default_queries_do_not_read_the_pods_of_another_named_after_it(tmp_path: Path) -> None:
    """Review (fixed), the defect: the default queries select a Deployment's pods with ``pod=~"$deployment-.*"``.
    Deployment ``web``'s pods are ``web-<template hash>-<suffix>``, but so, as far as that regex goes, are the pods
    of ``web-canary`` (``web-canary-<hash>-<suffix>``) in the same namespace: ``web`` is read at 100 requests/s (its
    own 10 plus the canary's 90) and 43 requests waiting, and its replica policy sizes it for ten times its load.
    Fixed: the defaults select ``pod=~"$deployment-[a-z0-9]+(-[a-z0-9]+)?"`` (the hash and the id have no ``-``)."""
    scaling = ServingScaling(1, 20, 10.0)
    deps = [ObservedDeployment("ml", name, 1, 1, serving=DeclaredServing(scaling)) for name in ("web", "web-canary")]
    at = float(T0 + SPAN_S - 60)
    defaults = {"queue": DEFAULT_QUEUE_QUERY, "running": DEFAULT_RUNNING_QUERY, "slo_misses": ""}
    with promserver.prometheus_over(tmp_path, _openmetrics()) as url, PrometheusTelemetry(url) as prom:
        rates, errors = deployment_rates(prom, deps, at, DEFAULT_RPS_QUERY)
        gauges = deployment_gauges(prom, deps, at, defaults)
    assert errors == {}
    assert rates[("ml", "web-canary")] == pytest.approx(90.0)
    assert rates[("ml", "web")] == pytest.approx(10.0)
    assert gauges.queued == {("ml", "web"): 3.0, ("ml", "web-canary"): 40.0}
    assert gauges.running == {("ml", "web"): 3.0, ("ml", "web-canary"): 40.0}
