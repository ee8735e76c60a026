"""Review (telemetry2): the controller's usage meter reading DCGM utilization (adapters/telemetry_prometheus.py
``gpu_utilization`` -> adapters/kubernetes/usage.py ``pod_utilization`` / ``usage_records``).

The upstream is a stand-in Prometheus on loopback (tests/loopback.py) that evaluates a selector's label matchers
(``=``, ``!=``, ``=~``, ``!~``; a regex fully anchored, a missing label read as ``""``) over fixed series, as a real
Prometheus selects them (the real-server tests skip where the Debian package ``prometheus`` is absent)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.rest import Kube, KubeConfig
from gpufleet.adapters.kubernetes.usage import MeterLoop
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import NodeSpec, PodRequest
from tests import loopback

T0 = 1_764_547_200  # an hour's start
H = 3600
H100 = "NVIDIA-H100-80GB-HBM3"
Series = list[tuple[dict[str, str], float]]  # (labels, value in percent, the same at every step)

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def _unquote(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


def select_series(query: str, series: Series) -> Series:
    """The series a plain selector ``metric{matchers}`` picks (the stand-in's whole PromQL)."""
    m = re.fullmatch(r"\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*\{(.*)\}\s*", query)
    assert m is not None, query
    metric, body = m.groups()
    matchers = []
    pos = 0
    while pos < len(body):
        mm = _MATCHER.match(body, pos)
        assert mm is not None, f"unparsed matcher at {body[pos:]!r}"
        matchers.append((mm.group(1), mm.group(2), _unquote(mm.group(3))))
        pos = mm.end()
    out = []
    for labels, v in series:
        if labels.get("__name__", "DCGM_FI_DEV_GPU_UTIL") != metric:
            continue
        ok = True
        for name, op, want in matchers:
            got = labels.get(name, "")
            hit = got == want if op in ("=", "!=") else re.fullmatch(want, got) is not None
            ok &= hit if op in ("=", "=~") else not hit
        if ok:
            out.append((labels, v))
    return out


def fake_prometheus(series: Series, queries: list[str]) -> loopback.JsonHandle:
    def handle(verb: str, target: str, auth: str | None, raw: bytes) -> tuple[int, Any, float]:
        u = urlsplit(target)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        queries.append(q["query"])
        start, end, step = int(float(q["start"])), int(float(q["end"])), int(float(q["step"]))
        result = [
            {"metric": labels, "values": [[t, str(v)] for t in range(start, end + 1, step)]}
            for labels, v in select_series(q["query"], series)
        ]
        return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}, 0.0

    return handle


@pytest.fixture
def prom_series() -> Iterator[tuple[Series, list[str], str]]:
    series: Series = []
    queries: list[str] = []
    server, url = loopback.serve_json(fake_prometheus(series, queries))
    try:
        yield series, queries, url
    finally:
        loopback.stop(server)


def _observation(pods: dict[str, tuple[int, int]], gpus: int = 8) -> Observation:
    """Pods ``name -> (GPUs, milli-GPUs each)`` running on node ``n1`` (``gpus`` GPUs advertised)."""
    node = ObservedNode(NodeSpec("n1", 128_000, 1_024_000, gpus), sku=H100, region="us-east-1",
                        capacity_type="on-demand")  # fmt: skip
    held = tuple(
        ObservedPod(PodRequest(f"ml/{p}", 1000, 1024, g, milli), "ml", p, p, "Running", node="n1", owner_name=p)
        for p, (g, milli) in sorted(pods.items())
    )
    return Observation(now_s=T0, nodes=(node,), pods=held)


def _meter_hour(loop: MeterLoop, obs: Observation) -> None:
    for k in range(H // 60 + 3):  # a reading a minute over the hour, then two more minutes: the hour is due
        loop.step(T0 + 60.0 * k, lambda: obs)


def test_a_prometheus_shared_by_two_clusters_does_not_mix_their_same_named_pods(
    tmp_path: Path, prom_series: tuple[Series, list[str], str]
) -> None:
    """Review (fixed), the defect: the controller's meter asks ``DCGM_FI_DEV_GPU_UTIL{pod!=""}`` and keys the answer by
    (namespace, pod). A Prometheus (or Thanos / Mimir) that holds several clusters' dcgm-exporters tells them apart
    only by a cluster label (external labels, relabelling); pod ``ml/train-1`` of cluster ``a`` (90 % busy) and the
    pod of the same name in cluster ``b`` (10 %) were averaged into one figure, 50 %, written as cluster ``a``'s
    record. The meter now reads only its own cluster's series (label ``cluster``, ``--dcgm-cluster-label``, equal to
    ``--dcgm-cluster``, by default ``--cluster``: the store's cluster id) and still reads series that carry no
    cluster label at all (a Prometheus of one cluster)."""
    series, queries, url = prom_series
    gpu0 = {"Hostname": "n1", "gpu": "0", "namespace": "ml", "pod": "train-1"}
    series += [({**gpu0, "cluster": "a"}, 90.0), ({**gpu0, "cluster": "b"}, 10.0)]
    db = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(db)
    migrate.upgrade(engine)
    engine.dispose()
    written: list[dict[str, object]] = []

    def sink(records: Any) -> tuple[int, list[str]]:
        written.extend(records)
        return len(records), []

    api, api_url = loopback.serve_json(lambda *_: (404, {"kind": "Status", "code": 404}, 0.0))  # no CRDs served
    kube = Kube(KubeConfig(api_url, "token"))
    cfg = ControllerConfig(store_url=db, inventory_cluster="a", meter_every_s=60, prometheus_url=url)
    try:
        # as the CLI builds it for `--cluster a --prometheus URL`, on the test's clock (the meter's readings below)
        ctl = Controller(kube, cfg, usage_sink=sink, clock=lambda: float(T0))
        assert ctl.store is not None and ctl.store.metering is not None
        _meter_hour(ctl.store.metering, _observation({"train-1": (1, 1000)}))
    finally:
        kube.close()
        loopback.stop(api)
    (rec,) = [r for r in written if r["workload_id"] == "ml:train-1"]
    assert rec["gpu_util"] == pytest.approx(0.9)  # cluster a's pod alone, not the mean with cluster b's
    assert queries and all('cluster=~"a|"' in q for q in queries)


def test_the_cluster_matcher_keeps_series_without_a_cluster_label(prom_series: tuple[Series, list[str], str]) -> None:
    """A Prometheus of one cluster has no cluster label: its series are read as before."""
    series, queries, url = prom_series
    series += [
        ({"Hostname": "n1", "gpu": "0", "namespace": "ml", "pod": "train-1"}, 70.0),
        ({"Hostname": "n1", "gpu": "0", "namespace": "ml", "pod": "train-1", "cluster": "eu.1"}, 10.0),
    ]
    with PrometheusTelemetry(url) as prom:
        batch = prom.gpu_utilization(T0, T0 + 600, 60, cluster=("cluster", "eu-1"))
        assert len(batch) == 11 and float(batch.util.mean()) == pytest.approx(0.7)  # "eu.1" is another cluster
        with pytest.raises(ValidationError):
            prom.gpu_utilization(T0, T0 + 600, 60, cluster=("bad-label", "eu-1"))
    assert queries == ['DCGM_FI_DEV_GPU_UTIL{pod!="",cluster=~"eu-1|"}']


def _shared_gpu_hour(
    prom_series: tuple[Series, list[str], str], percent: float, obs: Observation
) -> list[dict[str, object]]:
    """Pods ``a-1`` and ``b-1`` attributed GPU 0 of node ``n1``, each series at ``percent``: the records of the
    hour the meter writes for ``obs``."""
    series, _, url = prom_series
    dev = {"Hostname": "n1", "gpu": "0", "namespace": "ml"}
    series += [({**dev, "pod": "a-1"}, percent), ({**dev, "pod": "b-1"}, percent)]
    written: list[dict[str, object]] = []

    def sink(records: Any) -> tuple[int, list[str]]:
        written.extend(records)
        return len(records), []

    with PrometheusTelemetry(url) as prom:
        _meter_hour(MeterLoop("k1", lambda: (["h100_80gb"], {}), prom.gpu_utilization, sink, every_s=60), obs)
    return written


def test_pods_time_slicing_one_gpu_share_its_utilization(prom_series: tuple[Series, list[str], str]) -> None:
    """Review (fixed), the defect: with GPU time-slicing (the device plugin advertises each GPU as several) two pods that
    each requested ``nvidia.com/gpu: 1`` run on the same physical GPU 0 of node ``n1``, and dcgm-exporter attributes
    that device to both: a series per pod, each with the whole GPU's 80 %. ``pod_utilization`` gave each pod 80 %,
    so the hour's records said 2 GPUs held at 80 % = 1.6 busy GPU-hours, from one GPU that was busy 0.8 of the
    hour: busy time (and the cost books' used share) double-counted, idle waste hidden. The device's busy time is
    now split over the pods that share it in proportion to the GPUs they hold, when together they hold more than
    the one GPU it is (docs/kubernetes.md, "Usage metering")."""
    written = _shared_gpu_hour(prom_series, 80.0, _observation({"a-1": (1, 1000), "b-1": (1, 1000)}, gpus=4))
    busy_gpu_h = sum(float(r["gpus_allocated"]) * float(r["gpu_util"]) for r in written)  # type: ignore[arg-type]
    assert sum(float(r["gpus_allocated"]) for r in written) == pytest.approx(2.0)  # type: ignore[arg-type]
    assert busy_gpu_h == pytest.approx(0.8)  # one GPU 80 % busy for the hour
    assert {r["workload_id"]: r["gpu_util"] for r in written} == {"ml:a-1": 0.4, "ml:b-1": 0.4}


def test_fractional_shares_that_fit_one_gpu_keep_its_utilization(prom_series: tuple[Series, list[str], str]) -> None:
    """Two pods holding half a GPU each (``gpufleet.io/gpu-milli: 500``) on one GPU 60 % busy: together they hold one
    GPU, each keeps the device's 60 % (0.5 + 0.5 GPUs x 60 % = the device's 0.6 busy GPU-hours)."""
    written = _shared_gpu_hour(prom_series, 60.0, _observation({"a-1": (1, 500), "b-1": (1, 500)}))
    assert {r["workload_id"]: r["gpu_util"] for r in written} == {"ml:a-1": 0.6, "ml:b-1": 0.6}
