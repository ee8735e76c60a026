"""The controller scales opted-in serving Deployments with gpufleet's replica policy (the simulator loop's), from
request rates read out of a real Prometheus, through a real API server."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.deployment_json import deployment_from_json
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.kubernetes.workloads import (
    DEFAULT_QUEUE_QUERY,
    DEFAULT_RUNNING_QUERY,
    deployment_gauges,
    read_own_writes,
)
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import PodRequest
from tests import loopback
from tests.integration import promserver
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, running_controller, wait_for

T0 = 1_764_547_200  # 2025-12-01T00:00Z
SPAN_S = 3600
SCRAPE_S = 15
RPS = 40.0  # the llm Deployment's request rate
METRIC = "vllm:request_success_total"


WAITING = 300  # requests queued on each of the busy Deployment's two replicas
SURGE_AT = T0 + SPAN_S // 2  # from then on the surge Deployment's one pod has WAITING requests queued


def _openmetrics(ns: str) -> str:
    lines = [f"# TYPE {METRIC} counter"]
    pods = ("llm-5d8f-abcde", "llm-5d8f-fghij", "busy-7c9d-abcde", "busy-7c9d-fghij", "surge-6b2f-abcde")
    for pod in pods:  # llm and busy: two replicas each serving half of RPS; surge: one serving half
        for k in range(SPAN_S // SCRAPE_S + 1):
            lines.append(f'{METRIC}{{namespace="{ns}",pod="{pod}"}} {RPS / 2 * k * SCRAPE_S} {T0 + k * SCRAPE_S}')
    for gauge, value in (("vllm:num_requests_waiting", WAITING), ("vllm:num_requests_running", 16)):
        lines.append(f"# TYPE {gauge} gauge")
        for pod in pods:
            for k in range(SPAN_S // SCRAPE_S + 1):
                t = T0 + k * SCRAPE_S
                waits = pod.startswith("busy") or (pod.startswith("surge") and t >= SURGE_AT)
                v = value if waits or gauge.endswith("running") else 0
                lines.append(f'{gauge}{{namespace="{ns}",pod="{pod}"}} {v} {t}')
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture
def prometheus_url(ns: str, tmp_path: Path) -> Iterator[str]:
    if not promserver.available():
        pytest.skip(promserver.SKIP_REASON)
    with promserver.prometheus_over(tmp_path, _openmetrics(ns)) as url:
        yield url


def _deployment(kube: Kube, ns: str, name: str, replicas: int, annotations: dict[str, str]) -> None:
    body = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"gpufleet.io/kind": "serving"}, "annotations": annotations},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {
                     "schedulerName": "gpufleet", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                     "containers": [{"name": "srv", "image": "x", "resources": {
                         "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}},
    }  # fmt: skip
    kube.post(f"/apis/apps/v1/namespaces/{ns}/deployments", body)


def _replicas(kube: Kube, ns: str, name: str) -> int:
    return int(kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")["spec"]["replicas"])


OPT_IN = {"gpufleet.io/target-rps": "10", "gpufleet.io/max-replicas": "20", "gpufleet.io/min-replicas": "1"}


def _controller(kube: Kube, ns: str, url: str, clock: list[float], deployments: int = 3, **kw: Any) -> Controller:
    cfg = ControllerConfig(namespace=ns, lease_name=f"lease-{ns}", scale_every_s=60.0, prometheus_url=url, **kw)
    ctl = Controller(kube, cfg, clock=lambda: clock[0]).start()
    assert wait_for(
        lambda: len([d for d in ctl.view.observation().deployments if d.namespace == ns]) == deployments, 10
    )
    return ctl


def _setup(kube: Kube, ns: str) -> None:
    _deployment(kube, ns, "llm", 2, OPT_IN)
    _deployment(kube, ns, "quiet", 3, OPT_IN)  # opted in, but no series matches it
    _deployment(kube, ns, "plain", 2, {})  # not opted in


def test_request_rate_from_prometheus_scales_the_deployment_and_missing_data_scales_nothing(
    kube: Kube, ns: str, prometheus_url: str
) -> None:
    _setup(kube, ns)
    clock = [float(T0 + SPAN_S)]
    dry = _controller(kube, ns, prometheus_url, clock, dry_run=True)
    try:
        plan = dry.maybe_scale()
        assert plan is not None and {d.name for d in plan.decisions} == {"llm"}
        assert dry.maybe_scale() is None  # not due again within the period
        assert _replicas(kube, ns, "llm") == 2  # a dry run changes nothing
        assert [a["outcome"] for a in dry.act.audit if a["target"] == f"{ns}/llm" and a["action"] == "scale"] == [
            "dry_run"
        ]
        # its policy started from the hour of rate history Prometheus holds, one point a scale period
        (warm,) = [a for a in dry.act.audit if a["action"] == "scale_warm" and a["target"] == f"{ns}/llm"]
        assert warm["outcome"] == "replayed" and 55 <= warm["periods"] <= 60
        assert warm["gauges"] == ["queue", "running"]  # the default gauges' histories; no SLO-miss query given
    finally:
        dry.stop()
        dry.view.stop()

    ctl = _controller(kube, ns, prometheus_url, clock)
    try:
        plan = ctl.maybe_scale()
        assert plan is not None
        (llm,) = plan.decisions
        # 40 rps at 10 rps a replica sized to 80% busy is 5 replicas; the policy's spare makes at least 6
        assert 6 <= llm.desired <= 20 and llm.current == 2 and llm.reason
        assert _replicas(kube, ns, "llm") == llm.desired
        assert [s for s in plan.skipped if s[0] == ns] == [(ns, "quiet", "no_rate")]  # other tests' namespaces stay
        assert _replicas(kube, ns, "quiet") == 3 and _replicas(kube, ns, "plain") == 2
        events = {a["target"]: a for a in ctl.act.audit if a["action"] == "scale"}
        assert events[f"{ns}/llm"]["outcome"] == "applied" and events[f"{ns}/quiet"]["outcome"] == "skipped"
        assert f"{ns}/plain" not in events
        # the next period, at the same rate, holds what it has (the policy keeps its state across periods)
        clock[0] += 60
        again = ctl.maybe_scale()
        assert again is not None and again.decisions[0].current == llm.desired
        assert again.decisions[0].desired >= 6
    finally:
        ctl.stop()
        ctl.view.stop()


def test_requests_waiting_in_prometheus_reach_the_policy_and_without_the_gauges_none_are_seen(
    kube: Kube, ns: str, prometheus_url: str
) -> None:
    _setup(kube, ns)
    _deployment(kube, ns, "busy", 2, OPT_IN)  # llm's rate, with 600 requests waiting
    decided: list[dict[str, Any]] = []
    for gauges in ({}, {"queue_query": "", "running_query": ""}):
        ctl = _controller(kube, ns, prometheus_url, [float(T0 + SPAN_S)], deployments=4, dry_run=True, **gauges)
        try:
            plan = ctl.maybe_scale()
            assert plan is not None
            decided.append({d.name: (d.desired, d.reason) for d in plan.decisions if d.namespace == ns})
        finally:
            ctl.stop()
            ctl.view.stop()
    read, off = decided
    assert read["busy"][0] > read["llm"][0] and read["busy"][1] == "queue_drain"
    assert read["llm"] == off["llm"] == off["busy"]  # llm's queue is 0; off, busy's backlog is not seen
    assert _replicas(kube, ns, "busy") == 2  # a dry run


def test_gauge_queries_are_each_deployments_own_or_the_default_and_no_series_is_no_value(
    kube: Kube, ns: str, prometheus_url: str
) -> None:
    own = 'sum(vllm:num_requests_running{namespace="$namespace",pod=~"$deployment-.*"}) * 0 + 7'
    _deployment(kube, ns, "busy", 2, {**OPT_IN, "gpufleet.io/slo-miss-query": own})
    _deployment(kube, ns, "llm", 2, OPT_IN)
    _deployment(kube, ns, "quiet", 2, OPT_IN)  # no series of its pods
    deps = [deployment_from_json(kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{n}"))
            for n in ("busy", "llm", "quiet")]  # fmt: skip
    defaults = {"queue": DEFAULT_QUEUE_QUERY, "running": DEFAULT_RUNNING_QUERY, "slo_misses": ""}
    with PrometheusTelemetry(prometheus_url) as prom:
        g = deployment_gauges(prom, deps, T0 + SPAN_S, defaults)
    assert g.queued == {(ns, "busy"): 2 * WAITING, (ns, "llm"): 0.0}
    assert g.running == {(ns, "busy"): 32.0, (ns, "llm"): 32.0}
    assert g.slo_misses == {(ns, "busy"): 7.0}  # its own query; the others have none (no default)


def test_between_two_periods_a_queue_that_grows_scales_the_deployment_up_at_once(
    kube: Kube, ns: str, prometheus_url: str
) -> None:
    _deployment(kube, ns, "surge", 1, OPT_IN)  # 20 rps on one replica, no queue until SURGE_AT
    clock = [float(SURGE_AT - 10)]
    ctl = _controller(kube, ns, prometheus_url, clock, deployments=1)
    try:
        assert ctl.maybe_react() is None  # no period decided yet
        period = ctl.maybe_scale()
        assert period is not None
        (first,) = [d for d in period.decisions if d.namespace == ns]
        assert first.reason != "queue_drain" and _replicas(kube, ns, "surge") == first.desired
        clock[0] = SURGE_AT - 5.0  # still no queue: the fast path asks for nothing
        quiet = ctl.maybe_react()
        assert quiet is not None and [d for d in quiet.decisions if d.namespace == ns] == []
        clock[0] = SURGE_AT + 20.0  # the queue has grown; the next period is 30 s away
        reacted = ctl.maybe_react()
        assert reacted is not None
        (up,) = [d for d in reacted.decisions if d.namespace == ns]
        assert up.reason == "queue_growth" and up.desired > first.desired == up.current
        assert _replicas(kube, ns, "surge") == up.desired
        assert ctl.maybe_react() is None  # not due again within react_every_s
        clock[0] = SURGE_AT + 50.0
        assert ctl.maybe_react() is None  # the period decision is due: left to it
    finally:
        ctl.stop()
        ctl.view.stop()


def test_an_unreachable_prometheus_leaves_every_deployment_alone(kube: Kube, ns: str) -> None:
    _setup(kube, ns)
    clock = [float(T0 + SPAN_S)]
    ctl = _controller(kube, ns, f"http://127.0.0.1:{promserver.free_port()}", clock)
    try:
        plan = ctl.maybe_scale()
        assert plan is not None and plan.decisions == ()
        assert {s[1] for s in plan.skipped if s[0] == ns} == {"llm", "quiet"}  # other tests' namespaces too
        reasons = {a["reason"] for a in ctl.act.audit if a["action"] == "scale" and a["target"].startswith(f"{ns}/")}
        assert reasons == {"telemetry_unavailable"}
        assert _replicas(kube, ns, "llm") == 2 and _replicas(kube, ns, "quiet") == 3
    finally:
        ctl.stop()
        ctl.view.stop()


def test_scaling_without_a_prometheus_url_is_refused(kube: Kube, ns: str) -> None:
    with pytest.raises(ValidationError, match="prometheus"):
        Controller(kube, ControllerConfig(namespace=ns, scale_every_s=60.0))


def test_a_view_behind_the_controllers_own_scale_write_is_read_again_from_the_api_server(kube: Kube, ns: str) -> None:
    _setup(kube, ns)
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    before = [deployment_from_json(kube.get(f"{path}/{n}")) for n in ("llm", "plain")]  # the view, before the write
    kube.patch(f"{path}/llm/scale", {"spec": {"replicas": 6}})
    written = {(ns, "llm"): 6, (ns, "gone"): 4}
    got = read_own_writes(kube, before, written)
    assert [(d.name, d.replicas) for d in got] == [("llm", 6), ("plain", 2)] and written == {}
    # someone else's later change is what the policy sees, not what the controller wrote
    kube.patch(f"{path}/llm/scale", {"spec": {"replicas": 3}})
    written = {(ns, "llm"): 6}
    assert [d.replicas for d in read_own_writes(kube, before[:1], written)] == [3]
    # a Deployment deleted since keeps the view's object (nothing to decide from the server), and the write is dropped
    kube.delete(f"{path}/llm")
    written = {(ns, "llm"): 6}
    assert read_own_writes(kube, before[:1], written) == before[:1] and written == {}


def test_pods_bind_while_prometheus_hangs(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Replica scaling reads Prometheus on its own thread (adapters/kubernetes/side_worker.py): a Prometheus that
    accepts connections and never answers (10 s a query) costs scaling rounds, not binds."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # connections complete in the kernel's backlog; nothing is ever read or answered
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    _deployment(kube, ns, "llm", 2, OPT_IN)
    p = f"hp{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(f"{p}-0", gpus=8)])
    sched = f"s-{p}"
    cfg = ControllerConfig(scheduler_name=sched, namespace=ns, lease_name=f"l-{p}", scale_every_s=1.0,
                           prometheus_url=url)  # fmt: skip
    try:
        with running_controller(kube, cfg) as ctl:
            assert ctl.scaling is not None and wait_for(lambda: ctl.scaling.worker.busy("scale"), 10)  # a round hangs
            t0 = time.monotonic()
            for i in range(3):
                create_pod(kube, ns, pod_body(f"a{i}", PodRequest(f"a{i}", 1000, 1024, 1, 1000), sched))
            assert wait_for(lambda: all(q["spec"].get("nodeName") for q in pods_in(kube, ns)), 10)
            took = time.monotonic() - t0
            assert ctl.scaling.worker.busy("scale")  # still waiting on Prometheus
    finally:
        silent.close()
    assert took < 5  # with the reads on the binding loop, each pod waited out the queries' 10 s timeouts


class _SlowFirstAnswer(BaseHTTPRequestHandler):
    """A Prometheus stand-in whose first answer takes 9 s (longer than the controller's 5 s for a round at shutdown,
    shorter than a query's 10 s timeout); every answer is an empty result, as a Prometheus with no series gives."""

    answered = 0
    lock = threading.Lock()

    def do_GET(self) -> None:
        with self.lock:
            type(self).answered += 1
            first = type(self).answered == 1
        if first:
            time.sleep(9.0)
        kind = "matrix" if "query_range" in self.path else "vector"
        body = json.dumps({"status": "success", "data": {"resultType": kind, "result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815

    def log_message(self, *_: Any) -> None:
        pass


def test_a_round_cut_off_at_shutdown_is_not_reported_as_a_failure(kube: Kube, ns: str) -> None:
    """The controller stops while a scaling round waits on Prometheus: after 5 s it closes the Prometheus client; the
    waiting query then fails (that Deployment is skipped, telemetry unavailable) and the next Deployment's query finds
    the client closed. That is recorded as cut at shutdown (``cancelled``),
    not as a failed round on stderr, which every clean shutdown with a slow Prometheus printed until session 40."""
    server, url = loopback.serve(_SlowFirstAnswer)
    _deployment(kube, ns, "llm", 2, OPT_IN)
    _deployment(kube, ns, "llm2", 2, OPT_IN)  # its query comes after the client is closed
    p = f"sd{uuid.uuid4().hex[:5]}"
    # a round whose deadline (scale_round_s) is past the stop: it waits on the first answer when the controller stops
    cfg = ControllerConfig(scheduler_name=f"s-{p}", namespace=ns, lease_name=f"l-{p}", scale_every_s=1.0,
                           scale_round_s=60.0, prometheus_url=url)  # fmt: skip
    try:
        with running_controller(kube, cfg) as ctl:
            assert ctl.scaling is not None and wait_for(lambda: ctl.scaling.worker.busy("scale"), 10)
        assert wait_for(lambda: not ctl.scaling.worker.busy("scale"), 20)  # the round has ended, after the stop
    finally:
        loopback.stop(server)
    ends = [(a["reason"], a["outcome"]) for a in ctl.act.audit if a["target"] == "deployments"]
    assert ("scaling_round_cut_at_shutdown", "cancelled") in ends, ends
    assert ("scaling_round_failed", "failed") not in ends
