"""The Alibaba GenAI Stable Diffusion trace as a per-request file (skips when ../shared/data is absent)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpufleet.bench.autoscale_requests import RequestColumns, load_request_csv

SD = Path("serving") / "alibaba_genai_sd_request_trace.csv"


@pytest.mark.data
def test_sd_trace_loads_whole_and_by_busiest_model(shared_data: Path) -> None:
    path = shared_data / SD
    (whole,) = load_request_csv(path, RequestColumns("gmt_create", "exec_time_seconds"))
    assert whole.count.sum() == 26_823
    assert whole.req_work_s is not None and whole.req_work_s.max() == 567.0
    assert 22 * 86_400 < whole.duration_s < 24 * 86_400  # 23 days
    cols = RequestColumns(
        "gmt_create",
        "exec_time_seconds",
        where=(("predict_status", "SUCCEED"),),
        group_column="checkpoint_model_version_id",
        top_groups=3,
    )
    top = load_request_csv(path, cols)
    assert [t.trace_id.rsplit("=", 1)[1] for t in top] == ["M0002", "M0001", "M0004"]
    assert all(t.req_work_s is not None and np.all(t.req_work_s >= 3.0) for t in top)  # succeeded: >= 3 s
