"""Review (susp2): a Deployment name with a dot (Kubernetes allows them: a DNS subdomain) in the controller's default
PromQL (adapters/kubernetes/workloads.py), against a real Prometheus."""

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
# pod -> (requests/s, requests waiting): the pods of Deployment "api.v1" and of Deployment "api-v1" in one namespace
PODS = {"api.v1-5d8f7c9b4-x2k7p": (10.0, 3), "api-v1-6f9d8c7b5-q8w4z": (90.0, 40)}


def _openmetrics() -> str:
    lines = ["# TYPE vllm:request_success_total counter"]
    for pod, (rps, _) in PODS.items():
        for k in range(SPAN_S // SCRAPE_S + 1):
            lines.append(f'vllm:request_success_total{{namespace="ml",pod="{pod}",deployment="{pod[:6]}"}} '
                         f"{rps * k * SCRAPE_S} {T0 + k * SCRAPE_S}")  # fmt: skip
    for gauge in ("vllm:num_requests_waiting", "vllm:num_requests_running"):
        lines.append(f"# TYPE {gauge} gauge")
        for pod, (_, waiting) in PODS.items():
            for k in range(SPAN_S // SCRAPE_S + 1):
                lines.append(f'{gauge}{{namespace="ml",pod="{pod}"}} {waiting} {T0 + k * SCRAPE_S}')
    return "\n".join([*lines, "# EOF", ""])


@pytest.mark.skipif(not promserver.available(), reason=promserver.SKIP_REASON)
def test_a_dotted_deployment_name_reads_only_its_own_pods(tmp_path: Path) -> None:
    """Review (fixed), the defect: the default queries put ``$deployment`` into ``pod=~"$deployment-[a-z0-9]+(-[a-z0-9]+)?"`` as it
    is; in a regex the dot of ``api.v1`` matches any character, so Deployment ``api.v1`` also reads the pods of
    ``api-v1`` in its namespace (100 requests/s instead of 10; 43 waiting instead of 3) and is sized for ten times its
    load. Expected: the name's regex metacharacters escaped in a regex matcher, as it is everywhere else (an
    annotation's exact match ``deployment="$deployment"`` keeps the name as it is). Now so, for the defaults and an annotation's own regex alike."""
    scaling = ServingScaling(1, 20, 10.0)
    exact = 'sum(rate(vllm:request_success_total{namespace="$namespace",deployment="$deployment"}[2m]))'
    deps = [ObservedDeployment("ml", name, 1, 1, serving=DeclaredServing(scaling)) for name in ("api.v1", "api-v1")]
    own = [ObservedDeployment("ml", "api.v1", 1, 1, serving=DeclaredServing(scaling, rps_query=exact))]
    at = float(T0 + SPAN_S - 60)
    defaults = {"queue": DEFAULT_QUEUE_QUERY, "running": DEFAULT_RUNNING_QUERY, "slo_misses": ""}
    with promserver.prometheus_over(tmp_path, _openmetrics()) as url, PrometheusTelemetry(url) as prom:
        rates, errors = deployment_rates(prom, deps, at, DEFAULT_RPS_QUERY)
        gauges = deployment_gauges(prom, deps, at, defaults)
        by_label, label_errors = deployment_rates(prom, own, at, DEFAULT_RPS_QUERY)
    assert errors == {} and label_errors == {}
    assert by_label[("ml", "api.v1")] == pytest.approx(10.0)  # the exact match: the name as it is
    assert rates[("ml", "api-v1")] == pytest.approx(90.0)
    assert rates[("ml", "api.v1")] == pytest.approx(10.0)
    assert gauges.queued == {("ml", "api.v1"): 3.0, ("ml", "api-v1"): 40.0}
    assert gauges.running == {("ml", "api.v1"): 3.0, ("ml", "api-v1"): 40.0}
