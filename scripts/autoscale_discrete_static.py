"""The fewest constant GPUs meeting >= 99% SLO attainment in every hour when each request holds ONE replica
for its whole service time (FCFS, c servers: M/G/c-like), against the bench's fluid pool (static_peak).

    PYTHONPATH=src python scripts/autoscale_discrete_static.py   # SD whole + 3 busiest models, SLO 2 s, 10 s
"""

from __future__ import annotations

import heapq
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpufleet.bench.autoscale_requests import RequestColumns, load_request_csv

F64 = npt.NDArray[np.float64]


def discrete_waits(t: F64, w: F64, n: int) -> F64:
    """Wait of each request (sorted by arrival) on ``n`` servers, first come first served, no preemption."""
    free = [0.0] * n
    out = np.empty(len(t))
    for i in range(len(t)):
        start = max(float(t[i]), heapq.heappop(free))
        out[i] = start - t[i]
        heapq.heappush(free, start + float(w[i]))
    return out


def worst_hour(t: F64, ok: npt.NDArray[np.bool_]) -> float:
    h = (t // 3600).astype(np.int64)
    n = np.bincount(h)
    met = np.bincount(h, weights=ok.astype(np.float64))
    return float((met[n > 0] / n[n > 0]).min())


def main() -> None:
    sd = Path(os.environ.get("GPUFLEET_DATA", "../shared/data")) / "serving" / "alibaba_genai_sd_request_trace.csv"
    traces = load_request_csv(sd, RequestColumns("gmt_create", "exec_time_seconds"))
    traces += load_request_csv(
        sd, RequestColumns("gmt_create", "exec_time_seconds", group_column="checkpoint_model_version_id", top_groups=3)
    )
    for tr in traces:
        assert tr.req_t_s is not None and tr.req_work_s is not None
        for slo in (2.0, 10.0):
            for n in range(1, 200):
                ok = discrete_waits(tr.req_t_s, tr.req_work_s, n) <= slo + 1e-9
                if worst_hour(tr.req_t_s, ok) >= 0.99:
                    print(f"{tr.trace_id} slo={slo:g}: {n} GPUs (attainment {ok.mean():.4f})", flush=True)
                    break


if __name__ == "__main__":
    main()
