"""Telemetry uploads (CSV, JSON rows, saved Prometheus responses) and the transport seam of the Prometheus adapter."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from gpufleet.adapters.telemetry_files import read_csv_text, read_file, read_json_text
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry, TelemetryUnavailable
from gpufleet.cost.telemetry import GPU_UTIL, GR_ENGINE_ACTIVE, to_usage_columns
from gpufleet.domain.errors import ValidationError

CSV = """timestamp,metric,namespace,pod,device,value
2026-01-01T00:00:00Z,DCGM_FI_DEV_GPU_UTIL,ml,train-1,n1/0,40
2026-01-01T00:01:00Z,DCGM_FI_DEV_GPU_UTIL,ml,train-1,n1/0,60
1767225600,DCGM_FI_PROF_GR_ENGINE_ACTIVE,ml,train-1,n1/1,0.25
1767225600,DCGM_FI_DEV_GPU_UTIL,web,ghost,n2/0,90
"""


def test_csv_and_json_rows_give_the_same_batch() -> None:
    a = read_csv_text(CSV).sorted()
    rows = [dict(zip(["timestamp", "metric", "namespace", "pod", "device", "value"], ln.split(","), strict=True))
            for ln in CSV.strip().splitlines()[1:]]  # fmt: skip
    b = read_json_text(json.dumps(rows)).sorted()
    assert list(a.records()) == list(b.records())
    util = {(r.metric, r.device, r.t_s): r.util for r in a.records()}
    assert util[(GPU_UTIL, "n1/0", 1_767_225_660)] == pytest.approx(0.60)  # percent -> ratio
    assert util[(GR_ENGINE_ACTIVE, "n1/1", 1_767_225_600)] == pytest.approx(0.25)  # already a ratio


def test_upload_errors_name_the_line_and_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as e:
        read_csv_text(CSV + "2026-01-01T00:02:00Z,DCGM_FI_DEV_GPU_UTIL,ml,train-1,n1/0,lots\n", "u.csv")
    assert e.value.field == "value" and e.value.location == "u.csv:6"
    with pytest.raises(ValidationError, match="timestamp"):
        read_csv_text("timestamp,metric,namespace,pod,device,value\nyesterday,m,ns,p,d,1\n")
    with pytest.raises(ValidationError, match="missing column"):
        read_csv_text("timestamp,value\n1,2\n")
    bad = tmp_path / "t.txt"
    bad.write_text("x")
    with pytest.raises(ValidationError, match=r"\.csv or \.json"):
        read_file(bad)


def test_unknown_pods_are_counted_not_charged() -> None:
    batch = read_csv_text(CSV)
    usage, unmatched = to_usage_columns(batch, {("ml", "train-1"): 0}, 1_767_225_600, 300)
    assert unmatched == 1
    # n1/0's two one-minute samples fall in one 5-minute bucket and are averaged; n1/1 has its own sample
    assert sorted(usage.util.tolist()) == pytest.approx([0.25, 0.5])
    assert set(usage.alloc_idx.tolist()) == {0}


def test_long_ranges_are_split_under_the_point_limit() -> None:
    calls: list[tuple[int, int]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        start, end, step = (int(float(request.url.params[k])) for k in ("start", "end", "step"))
        calls.append((start, end))
        values = [[t, "50"] for t in range(start, end + 1, step)]
        result = [{"metric": {"__name__": GPU_UTIL, "namespace": "ml", "pod": "p", "Hostname": "h", "gpu": "0"},
                   "values": values}]  # fmt: skip
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": result}})

    with PrometheusTelemetry("http://prom.test", transport=httpx.MockTransport(handler)) as prom:
        batch = prom.gpu_utilization(0, 25_000 * 60, 60)
    assert len(calls) == 3 and all((e - s) // 60 + 1 <= 10_000 for s, e in calls)
    assert len(batch) == 25_001 and np.all(np.diff(batch.t_s) == 60)


def test_a_refused_query_is_a_clear_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": "parse error"})

    with PrometheusTelemetry("http://prom.test", transport=httpx.MockTransport(handler)) as prom, pytest.raises(
        TelemetryUnavailable, match="parse error"
    ):  # fmt: skip
        prom.gpu_utilization(0, 600, 60)
