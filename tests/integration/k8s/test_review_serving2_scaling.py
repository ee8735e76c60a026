"""Review (serving2): the controller's replica scaling as it acts on the real API server (v1.20.2) and reads a real
Prometheus: someone else scaling the same Deployment, an HPA, a Deployment not managed by gpufleet, scale to zero
and the first request after it, and odd objects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.deployment_json import deployment_from_json
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.kubernetes.workloads import apply_scale
from gpufleet.control.replicas import ScaleDecision
from tests.integration import promserver
from tests.integration.k8s.helpers import wait_for

T0 = 1_764_547_200  # 2025-12-01T00:00Z
SPAN_S = 3600
SCRAPE_S = 15
METRIC = "vllm:request_success_total"
GATEWAY = "gateway_requests_total"
WAKE_AT = T0 + SPAN_S - 300  # the first request for the cold Deployment reaches its gateway then (5 rps)


def _openmetrics(ns: str) -> str:
    """llm: two pods at 20 rps each; idle: one pod that served nothing for the hour; cold: no pod (scaled to zero),
    its gateway's counter flat until WAKE_AT, then 5 rps."""
    lines = [f"# TYPE {METRIC} counter"]
    for pod, rps in (("llm-5d8f-abcde", 20.0), ("llm-5d8f-fghij", 20.0), ("idle-7c9d-abcde", 0.0)):
        for k in range(SPAN_S // SCRAPE_S + 1):
            lines.append(f'{METRIC}{{namespace="{ns}",pod="{pod}"}} {rps * k * SCRAPE_S} {T0 + k * SCRAPE_S}')
    lines.append(f"# TYPE {GATEWAY} counter")
    for k in range(SPAN_S // SCRAPE_S + 1):
        t = T0 + k * SCRAPE_S
        lines.append(f'{GATEWAY}{{namespace="{ns}",backend="cold"}} {5.0 * max(0, t - WAKE_AT)} {t}')
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture
def prometheus_url(ns: str, tmp_path: Path) -> Iterator[str]:
    if not promserver.available():
        pytest.skip(promserver.SKIP_REASON)
    with promserver.prometheus_over(tmp_path, _openmetrics(ns)) as url:
        yield url


OPT_IN = {"gpufleet.io/target-rps": "10", "gpufleet.io/max-replicas": "20", "gpufleet.io/min-replicas": "1"}


def _deployment(kube: Kube, ns: str, name: str, replicas: int | None, annotations: dict[str, str]) -> None:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {
            "schedulerName": "gpufleet", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "containers": [{"name": "srv", "image": "x", "resources": {
                "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}},
    }  # fmt: skip
    if replicas is not None:
        spec["replicas"] = replicas
    body = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": {"gpufleet.io/kind": "serving"}, "annotations": annotations},
            "spec": spec}  # fmt: skip
    kube.post(f"/apis/apps/v1/namespaces/{ns}/deployments", body)


def _path(ns: str, name: str) -> str:
    return f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"


def _replicas(kube: Kube, ns: str, name: str) -> int:
    return int(kube.get(_path(ns, name))["spec"]["replicas"])


def _controller(kube: Kube, ns: str, url: str, clock: list[float], names: set[str], **kw: Any) -> Controller:
    cfg = ControllerConfig(
        namespace=ns, lease_name=f"lease-{ns}", scale_every_s=60.0, prometheus_url=url, react_every_s=0, **kw
    )
    ctl = Controller(kube, cfg, clock=lambda: clock[0]).start()
    assert wait_for(lambda: {d.name for d in ctl.view.observation().deployments if d.namespace == ns} >= names, 10)
    return ctl


def _scales(ctl: Controller, ns: str, name: str) -> list[dict[str, Any]]:
    return [a for a in ctl.act.audit if a["action"] == "scale" and a["target"] == f"{ns}/{name}"]


def test_a_scale_by_someone_else_between_the_decision_and_the_write_is_not_overwritten(kube: Kube, ns: str) -> None:
    """Review (fixed), the defect: the scale write was a blind merge patch of ``spec.replicas``; a human's
    ``kubectl scale`` (or an HPA's write) landing between the observation the policy decided from and the write was
    silently overwritten (outcome ``applied``). Now the write carries the scale subresource's resourceVersion, read
    with its replicas: replicas other than those decided from are someone else's, left as they are and audited
    (``conflict``, with the replicas found)."""
    _deployment(kube, ns, "web", 2, OPT_IN)
    act = Actuator(kube)
    kube.patch(f"{_path(ns, 'web')}/scale", {"spec": {"replicas": 7}})  # a human, after the observation of 2
    out = apply_scale(act, ScaleDecision(ns, "web", current=2, desired=5, reason="forecast"))
    assert out == "conflict" and _replicas(kube, ns, "web") == 7
    rec = act.audit[-1]
    assert (rec["action"], rec["outcome"], rec["reason"], rec["replicas_now"]) == ("scale", "conflict", "forecast", 7)
    # unchanged by anyone: the write applies
    assert apply_scale(act, ScaleDecision(ns, "web", current=7, desired=5, reason="forecast")) == "applied"
    assert _replicas(kube, ns, "web") == 5


def test_a_deployment_deleted_before_the_write_is_recorded_not_found(kube: Kube, ns: str) -> None:
    """Review (holds): a Deployment deleted between the observation and the scale write is an audit record
    ``not_found`` (no traceback, nothing created)."""
    _deployment(kube, ns, "gone", 2, OPT_IN)
    kube.delete(_path(ns, "gone"))
    act = Actuator(kube)
    assert apply_scale(act, ScaleDecision(ns, "gone", current=2, desired=4, reason="forecast")) == "not_found"
    assert act.audit[-1]["outcome"] == "not_found"


def test_replicas_absent_is_the_api_servers_default_of_one(kube: Kube, ns: str) -> None:
    """Review (holds): a Deployment created without ``spec.replicas`` is stored with 1 (apps/v1 defaulting), and
    that is what gpufleet observes."""
    _deployment(kube, ns, "bare", None, OPT_IN)
    assert deployment_from_json(kube.get(_path(ns, "bare"))).replicas == 1


def test_a_deployment_scaled_by_someone_else_is_held_not_fought(kube: Kube, ns: str, prometheus_url: str) -> None:
    """Review (fixed), the defect: after a human (or GitOps, or another autoscaler) scaled a Deployment gpufleet
    had scaled, the next period silently wrote gpufleet's count back, and a writer that keeps resetting it met a
    write every period (flapping). Now a Deployment whose replicas differ from gpufleet's last write is audited
    ``scaled_by_other`` (the replicas gpufleet wrote and found) and held as it is, longer each time it recurs."""
    _deployment(kube, ns, "llm", 2, OPT_IN)
    clock = [float(T0 + SPAN_S)]
    ctl = _controller(kube, ns, prometheus_url, clock, {"llm"})
    try:
        ctl.maybe_scale()
        wrote = _replicas(kube, ns, "llm")
        assert wrote >= 6
        writes = 1

        def llm_replicas() -> list[int]:  # the view is cluster-wide: earlier tests' namespaces hold an llm too
            return [d.replicas for d in ctl.view.observation().deployments if (d.namespace, d.name) == (ns, "llm")]

        for _ in range(6):  # the other writer resets it to 2 every period
            kube.patch(f"{_path(ns, 'llm')}/scale", {"spec": {"replicas": 2}})
            assert wait_for(lambda: llm_replicas() == [2])
            clock[0] += 60
            ctl.maybe_scale()
            if _replicas(kube, ns, "llm") != 2:
                writes += 1
        assert writes == 1, "gpufleet wrote back over someone else's scale"
        held = [a for a in _scales(ctl, ns, "llm") if a["reason"] == "scaled_by_other"]
        assert held and held[0]["outcome"] == "skipped" and (held[0]["wrote"], held[0]["replicas_now"]) == (wrote, 2)
    finally:
        ctl.stop()
        ctl.view.stop()


def test_a_deployment_an_hpa_scales_is_left_alone_and_said_so(kube: Kube, ns: str, prometheus_url: str) -> None:
    """Review (fixed), the defect: a Deployment that an HorizontalPodAutoscaler also targets was scaled by gpufleet
    all the same: two controllers writing one field, each undoing the other. Now it is left alone, audited
    ``skipped`` with reason ``hpa_manages`` and the HPA's name."""
    _deployment(kube, ns, "llm", 2, OPT_IN)
    hpa = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "llm-hpa"},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
                    "minReplicas": 1, "maxReplicas": 4, "targetCPUUtilizationPercentage": 80}}  # fmt: skip
    kube.post(f"/apis/autoscaling/v1/namespaces/{ns}/horizontalpodautoscalers", hpa)
    clock = [float(T0 + SPAN_S)]
    ctl = _controller(kube, ns, prometheus_url, clock, {"llm"})
    try:
        plan = ctl.maybe_scale()
        assert plan is not None and _replicas(kube, ns, "llm") == 2
        recs = _scales(ctl, ns, "llm")
        assert [(a["reason"], a["outcome"], a.get("hpa")) for a in recs] == [("hpa_manages", "skipped", "llm-hpa")]
    finally:
        ctl.stop()
        ctl.view.stop()


def test_a_deployment_annotated_not_managed_is_left_alone(kube: Kube, ns: str, prometheus_url: str) -> None:
    """Review (fixed), the defect: there was no way to keep an opted-in Deployment out of gpufleet's hands short of
    removing its annotations. ``gpufleet.io/managed: "false"`` now leaves it alone (audited ``not_managed``)."""
    _deployment(kube, ns, "llm", 2, {**OPT_IN, "gpufleet.io/managed": "false"})
    clock = [float(T0 + SPAN_S)]
    ctl = _controller(kube, ns, prometheus_url, clock, {"llm"})
    try:
        ctl.maybe_scale()
        assert _replicas(kube, ns, "llm") == 2
        assert [(a["reason"], a["outcome"]) for a in _scales(ctl, ns, "llm")] == [("not_managed", "skipped")]
    finally:
        ctl.stop()
        ctl.view.stop()


def test_scale_to_zero_needs_a_rate_that_outlives_the_pods(kube: Kube, ns: str, prometheus_url: str) -> None:
    """Review (fixed), the defect: with the default rate query (the Deployment's own pods' vLLM counter) a
    ``min-replicas: 0`` Deployment was scaled to zero after an idle hour; with no pod left there is no series, every
    period after is ``no_rate`` (rightly: no data is not zero traffic) and the first request is never seen: zero
    was a one-way door. Now a decision of 0 for a Deployment whose rate is read from its own pods is lifted to 1,
    reason ``no_wake_signal``. With a rate that outlives the pods (a gateway's counter, ``gpufleet.io/rps-query``)
    scale to zero stands, and a Deployment at zero is scaled up the first period its gateway sees requests."""
    zero_ok = {**OPT_IN, "gpufleet.io/min-replicas": "0"}
    _deployment(kube, ns, "idle", 1, zero_ok)  # the default query: its own pods
    gw = {
        **zero_ok,
        "gpufleet.io/rps-query": f'sum(rate({GATEWAY}{{namespace="$namespace",backend="$deployment"}}[2m]))',
    }
    _deployment(kube, ns, "cold", 0, gw)
    clock = [float(WAKE_AT - 60)]
    ctl = _controller(kube, ns, prometheus_url, clock, {"idle", "cold"})
    try:
        plan = ctl.maybe_scale()
        assert plan is not None
        assert _replicas(kube, ns, "idle") == 1 and _replicas(kube, ns, "cold") == 0
        idle = _scales(ctl, ns, "idle")
        assert [a["reason"] for a in idle] == ["no_wake_signal"]
        clock[0] = float(WAKE_AT + 150)  # the gateway has counted 2.5 minutes of requests
        ctl.maybe_scale()
        assert _replicas(kube, ns, "cold") >= 1
        assert _scales(ctl, ns, "cold")[-1]["outcome"] == "applied"
        # the idle Deployment's pod is gone (its series went stale): no rate, nothing scaled, not read as zero
        clock[0] = float(T0 + SPAN_S + 600)
        ctl.maybe_scale()
        assert _scales(ctl, ns, "idle")[-1]["reason"] == "no_rate" and _replicas(kube, ns, "idle") == 1
    finally:
        ctl.stop()
        ctl.view.stop()
