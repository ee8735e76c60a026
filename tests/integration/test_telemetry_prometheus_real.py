"""The Prometheus telemetry adapter against a real Prometheus server on loopback.

The test writes dcgm-exporter-shaped series as OpenMetrics, backfills them into a fresh TSDB with
``promtool tsdb create-blocks-from openmetrics``, starts ``prometheus`` on a free port over that TSDB, and reads the
data back through ``query_range``. Needs the Debian package ``prometheus``; skipped with the reason when absent.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from gpufleet.adapters.telemetry_files import read_json_text
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry, TelemetryUnavailable
from gpufleet.cost.meter import meter_usage
from gpufleet.cost.telemetry import GPU_UTIL, GR_ENGINE_ACTIVE, to_usage_columns
from tests.integration import promserver

T0 = 1_764_547_200  # 2025-12-01T00:00Z
SPAN_S = 2 * 3600
SCRAPE_S = 60
STEP_S = 300

# (metric, labels, base value); value at sample k is base + (k % 3)  (percent) or (base + (k % 3)) / 100 (ratio)
SERIES = [
    (GPU_UTIL, {"Hostname": "n1", "gpu": "0", "namespace": "ml", "pod": "train-1"}, 50.0),
    (GPU_UTIL, {"Hostname": "n1", "gpu": "1", "namespace": "ml", "pod": "train-1"}, 70.0),
    (GPU_UTIL, {"Hostname": "n1", "gpu": "2", "namespace": "web", "pod": "serve-1"}, 10.0),
    (GPU_UTIL, {"Hostname": "n1", "gpu": "3", "namespace": "", "pod": ""}, 0.0),  # no pod: not attributed
    (GPU_UTIL, {"Hostname": "n2", "gpu": "0", "GPU_I_ID": "1", "namespace": "ml", "pod": "nb-1"}, 97.0),  # MIG
    (GR_ENGINE_ACTIVE, {"Hostname": "n1", "gpu": "0", "namespace": "ml", "pod": "train-1"}, 45.0),
]

needs_prometheus = pytest.mark.skipif(not promserver.available(), reason=promserver.SKIP_REASON)


def _value(metric: str, base: float, k: int) -> float:
    v = base + (k % 3)
    return v / 100 if metric == GR_ENGINE_ACTIVE else v


def _openmetrics() -> str:
    lines = [f"# TYPE {GPU_UTIL} gauge", f"# TYPE {GR_ENGINE_ACTIVE} gauge"]
    for metric, labels, base in SERIES:
        lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for k in range(SPAN_S // SCRAPE_S + 1):
            lines.append(f"{metric}{{{lab}}} {_value(metric, base, k)} {T0 + k * SCRAPE_S}")
    # OpenMetrics wants each metric family contiguous: sort keeps families together and samples in time order
    body = sorted(lines[2:], key=lambda ln: (ln.split("{")[0], ln.split("}")[0], int(ln.rsplit(" ", 1)[1])))
    util = [ln for ln in body if ln.startswith(GPU_UTIL)]
    eng = [ln for ln in body if ln.startswith(GR_ENGINE_ACTIVE)]
    return "\n".join([lines[0], *util, lines[1], *eng, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not promserver.available():
        pytest.skip(promserver.SKIP_REASON)
    with promserver.prometheus_over(tmp_path_factory.mktemp("prom"), _openmetrics()) as url:
        yield url


@needs_prometheus
def test_reads_dcgm_utilization_per_pod_and_device_from_a_real_server(prometheus_url: str) -> None:
    with PrometheusTelemetry(prometheus_url) as prom:
        batch = prom.gpu_utilization(T0, T0 + SPAN_S, STEP_S).sorted()
    keys = {(k.namespace, k.pod, k.device) for k in batch.series}
    assert keys == {("ml", "train-1", "n1/0"), ("ml", "train-1", "n1/1"), ("web", "serve-1", "n1/2"),
                    ("ml", "nb-1", "n2/0/mig1")}  # fmt: skip
    n_steps = SPAN_S // STEP_S + 1
    assert len(batch) == 4 * n_steps
    for i, k in enumerate(batch.series):
        base = next(b for m, lab, b in SERIES if m == GPU_UTIL and lab.get("pod") == k.pod
                    and f"{lab['Hostname']}/{lab['gpu']}" == k.device.removesuffix("/mig1"))  # fmt: skip
        got = batch.util[batch.series_idx == i]
        want = np.array([_value(GPU_UTIL, base, j * STEP_S // SCRAPE_S) for j in range(n_steps)]) / 100
        np.testing.assert_allclose(got, want)


@needs_prometheus
def test_engine_active_ratio_and_namespace_filter(prometheus_url: str) -> None:
    with PrometheusTelemetry(prometheus_url) as prom:
        eng = prom.gpu_utilization(T0, T0 + 600, STEP_S, metric=GR_ENGINE_ACTIVE)
        web = prom.gpu_utilization(T0, T0 + SPAN_S, STEP_S, namespace="web")
    assert [k.pod for k in eng.series] == ["train-1"]
    np.testing.assert_allclose(eng.util, [0.45, 0.47, 0.46])  # k = 0, 5, 10 -> base + k % 3
    assert {k.pod for k in web.series} == {"serve-1"}


@needs_prometheus
def test_prometheus_and_file_upload_give_the_same_records_and_metering(prometheus_url: str) -> None:
    with PrometheusTelemetry(prometheus_url) as prom:
        live = prom.gpu_utilization(T0, T0 + SPAN_S, STEP_S).sorted()
    saved = httpx.get(
        f"{prometheus_url}/api/v1/query_range",
        params={"query": f'{GPU_UTIL}{{pod!=""}}', "start": T0, "end": T0 + SPAN_S, "step": STEP_S},
    ).text
    uploaded = read_json_text(saved, "saved.json").sorted()
    assert list(live.records()) == list(uploaded.records())

    alloc_by_pod = {("ml", "train-1"): 0, ("web", "serve-1"): 1, ("ml", "nb-1"): 2}
    usage, unmatched = to_usage_columns(live, alloc_by_pod, T0, STEP_S)
    assert unmatched == 0
    per_device_parts = np.array([840, 840, 120], dtype=np.int64)  # nb-1 is a MIG 1g slice (1/7 GPU)
    totals = meter_usage(usage, per_device_parts)
    # train-1: two GPUs at ~51 % and ~71 % over 25 buckets of 300 s
    assert totals.samples.tolist() == [50, 25, 25]
    assert 0.5 < totals.mean_util[0] < 0.72
    assert totals.used_gpu_s[2] == pytest.approx(float(usage.util[usage.alloc_idx == 2].sum()) * STEP_S / 7)


def test_unreachable_server_is_a_clear_error() -> None:
    with PrometheusTelemetry(f"http://127.0.0.1:{promserver.free_port()}", timeout_s=1.0) as prom, pytest.raises(
        TelemetryUnavailable, match="unreachable"
    ):  # fmt: skip
        prom.gpu_utilization(T0, T0 + 600, STEP_S)
