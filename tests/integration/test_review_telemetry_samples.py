"""Review (hostile): garbled DCGM samples read from a real Prometheus by the controller's usage meter
(adapters/telemetry_prometheus.py ``gpu_utilization`` -> adapters/kubernetes/usage.py ``pod_utilization`` /
``usage_records``) and written into the store through the real ingest service (SQLite).

dcgm-exporter is a C++ exporter behind a scrape; a driver fault, an exporter bug or a relabelling mistake can put a
``+Inf``, ``-Inf`` or a value of ``1e6`` percent into ``DCGM_FI_DEV_GPU_UTIL`` for one scrape. Prometheus stores and
returns them as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.adapters.kubernetes.usage import MeterLoop, store_pools
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import UtilizationRow
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.schedule.table import NodeSpec, PodRequest
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import FixedClock
from gpufleet.service.ingest import IngestService
from tests.integration import promserver

T0 = 1_764_547_200  # 2025-12-01T00:00Z, an hour's start
H = 3600
SCRAPE_S = 15

needs_prometheus = pytest.mark.skipif(not promserver.available(), reason=promserver.SKIP_REASON)


def _openmetrics(pods: dict[str, dict[int, str]]) -> str:
    """DCGM_FI_DEV_GPU_UTIL of each pod's one device every 15 s over the hour and a little after: 0 %, except at
    the scrapes named in ``pods[pod]`` (scrape index -> the value exported there)."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for i, (pod, odd) in enumerate(sorted(pods.items())):
        for k in range((H + 600) // SCRAPE_S):
            lab = f'namespace="ml",pod="{pod}",Hostname="h",gpu="{i}"'
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{lab}}} {odd.get(k, '0')} {T0 + SCRAPE_S * k}")
    return "\n".join([*lines, "# EOF", ""])


def _observation(pods: Sequence[str]) -> Observation:
    node = ObservedNode(NodeSpec("n1", 128_000, 1_024_000, 8), sku="NVIDIA-H100-80GB-HBM3", region="us-east-1",
                        capacity_type="on-demand")  # fmt: skip
    held = tuple(
        ObservedPod(PodRequest(f"ml/{p}", 1000, 1024, 1, 1000), "ml", p, p, "Running", node="n1", owner_name=p)
        for p in pods
    )
    return Observation(now_s=T0, nodes=(node,), pods=held)


def _meter_one_hour(tmp_path: Path, pods: dict[str, dict[int, str]]) -> tuple[MeterLoop, dict[str, UtilizationRow]]:
    """The controller's meter over one hour of the pods (1 GPU each), DCGM from a real Prometheus, records into a
    real store; returns the loop and the hour's rows by workload."""
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    migrate.upgrade(engine)
    ingest = IngestService(engine, FixedClock(T0 + 2 * H))
    admin = Actor("controller", Role.ML_PLATFORM_ADMIN, None)

    def pools() -> tuple[list[str], dict[tuple[str, str, str], str]]:
        with Session(engine) as s:
            return store_pools(s)

    obs = _observation(sorted(pods))
    with promserver.prometheus_over(tmp_path, _openmetrics(pods)) as url, PrometheusTelemetry(url) as prom:
        loop = MeterLoop("k3", pools, prom.gpu_utilization, lambda r: ingest.ingest_leaving_out(admin, r), every_s=60)
        for k in range(H // 60 + 3):  # a reading a minute for the hour, then two more minutes: the hour is due
            loop.step(T0 + 60.0 * k, lambda: obs)
    with Session(engine) as s:
        rows = {r.workload_id: r for r in s.scalars(select(UtilizationRow).where(UtilizationRow.bucket_start_s == T0))}
    engine.dispose()
    return loop, rows


@needs_prometheus
def test_one_garbled_dcgm_sample_neither_makes_an_idle_hour_busy_nor_loses_its_gpu_hours(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``pod_utilization`` averages the raw samples of the hour and ``usage_records``
    clamps only the mean to [0, 1]. Pod ``spike`` is idle for the hour but one scrape exported 1e6 %: its hour was
    written 100 % busy (the mean 16,667 %, clamped to 1). Pod ``flip`` is idle but one scrape exported +Inf and one a
    minute later -Inf: its mean was NaN, ``min(max(nan, 0), 1)`` stays NaN, the store refused ``gpu_util`` NaN and
    the meter left the record out: the hour's GPU-hours of that workload were lost to forecasts and cost. Fixed in
    cost/telemetry.py ``BatchBuilder.add`` (every adapter's batch): each sample is clipped to 0..1 and an infinite
    one is no measurement (NaN)."""
    loop, rows = _meter_one_hour(tmp_path, {"spike": {100: "1e6"}, "flip": {100: "+Inf", 104: "-Inf"}, "calm": {}})
    assert not loop.failures, list(loop.failures)
    (hour,) = loop.written
    assert hour.refused == (), hour.refused  # no record of the hour refused
    assert set(rows) == {"ml:spike", "ml:flip", "ml:calm"}
    for wid in rows:
        assert rows[wid].gpus_allocated == 1.0, wid
        # 0 % on every scrape but one: not busier than one minute in sixty
        assert rows[wid].gpu_util is not None and rows[wid].gpu_util <= 1 / 60 + 1e-6, (wid, rows[wid].gpu_util)
