"""Review (rightsize): GPU memory measured by the controller's usage meter (DCGM ``DCGM_FI_DEV_FB_USED``, MiB,
through adapters/telemetry_prometheus.py ``gpu_memory_gb``) into the usage records' ``gpu_mem_gb``, so rightsizing
applies its memory-aware rule to measured workloads (docs/cost.md). Same stand-in Prometheus as the telemetry2 review."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.rest import Kube, KubeConfig
from gpufleet.adapters.kubernetes.usage import MeterLoop
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry
from tests import loopback
from tests.unit.adapters.test_review_telemetry2_dcgm import T0, Series, _meter_hour, _observation, prom_series

__all__ = ["prom_series"]  # the fixture, shared
FB = "DCGM_FI_DEV_FB_USED"


def _dev(pod: str, gpu: str, **extra: str) -> dict[str, str]:
    return {"Hostname": "n1", "gpu": gpu, "namespace": "ml", "pod": pod, **extra}


def test_the_meter_writes_each_workloads_peak_gpu_memory(
    tmp_path: Path, prom_series: tuple[Series, list[str], str]
) -> None:
    """Review (fixed), the defect: the usage records carried utilization only, so rightsizing never saw GPU memory
    (all NaN) and sized by throughput alone. The meter, built as the CLI builds it (``--prometheus``), now also reads
    ``DCGM_FI_DEV_FB_USED`` of its cluster: ``train-1`` on two GPUs using 30,720 + 20,480 MiB is written with
    ``gpu_mem_gb`` 50.0 (one replica's GPU memory, summed over its devices); ``serve-1`` with no FB series is
    written with ``gpu_mem_gb`` None (not measured, never 0)."""
    series, queries, url = prom_series
    series += [(_dev("train-1", "0"), 40.0), (_dev("train-1", "1"), 20.0), (_dev("serve-1", "2"), 10.0)]
    series += [(_dev("train-1", "0", __name__=FB), 30_720.0), (_dev("train-1", "1", __name__=FB), 20_480.0),
               (_dev("train-1", "1", __name__=FB, cluster="b"), 70_000.0)]  # fmt: skip
    db = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(db)
    migrate.upgrade(engine)
    engine.dispose()
    written: list[dict[str, object]] = []

    def sink(records: Any) -> tuple[int, list[str]]:
        written.extend(records)
        return len(records), []

    api, api_url = loopback.serve_json(lambda *_: (404, {"kind": "Status", "code": 404}, 0.0))
    kube = Kube(KubeConfig(api_url, "token"))
    cfg = ControllerConfig(store_url=db, inventory_cluster="a", meter_every_s=60, prometheus_url=url)
    try:
        ctl = Controller(kube, cfg, usage_sink=sink, clock=lambda: float(T0))
        assert ctl.store is not None and ctl.store.metering is not None
        _meter_hour(ctl.store.metering, _observation({"train-1": (2, 1000), "serve-1": (1, 1000)}))
    finally:
        kube.close()
        loopback.stop(api)
    by_wl = {r["workload_id"]: r for r in written}
    assert by_wl["ml:train-1"]["gpu_mem_gb"] == 50.0  # cluster b's series of the same pod name not read
    assert by_wl["ml:train-1"]["gpu_util"] == pytest.approx(0.3)
    assert by_wl["ml:serve-1"]["gpu_mem_gb"] is None
    assert any(q.startswith(f'{FB}{{pod!="",cluster=~"a|"}}') for q in queries), queries


def test_a_failed_memory_read_writes_the_hour_unmeasured(prom_series: tuple[Series, list[str], str]) -> None:
    """Review (holds): a GPU-memory read that fails does not hold the hour back (its GPUs and utilization are
    written) and makes up no figure: ``gpu_mem_gb`` None, the failure reported."""
    series, _, url = prom_series
    series += [(_dev("train-1", "0"), 50.0)]
    written: list[dict[str, object]] = []

    def sink(records: Any) -> tuple[int, list[str]]:
        written.extend(records)
        return len(records), []

    def broken(*_: int) -> dict[tuple[str, str], float]:
        raise RuntimeError("FB_USED over the sample limit")

    with PrometheusTelemetry(url) as prom:
        loop = MeterLoop("k1", lambda: (["h100_80gb"], {}), prom.gpu_utilization, sink, every_s=60, gpu_memory=broken)
        _meter_hour(loop, _observation({"train-1": (1, 1000)}))
    (rec,) = written
    assert rec["gpu_util"] == pytest.approx(0.5) and rec["gpu_mem_gb"] is None
    assert any("GPU memory not measured" in f for f in loop.failures)


def test_memory_samples_that_are_not_numbers_are_no_measurement(prom_series: tuple[Series, list[str], str]) -> None:
    """Review (holds): a NaN or negative FB sample is no measurement (the pod is left out, not read as 0 GB)."""
    series, _, url = prom_series
    series += [(_dev("a-1", "0", __name__=FB), float("nan")), (_dev("b-1", "1", __name__=FB), -5.0),
               (_dev("c-1", "2", __name__=FB), 81_920.0)]  # fmt: skip
    with PrometheusTelemetry(url) as prom:
        assert prom.gpu_memory_gb(T0, T0 + 600, 60) == {("ml", "c-1"): 80.0}
