"""gpufleet's defaults vs the opt-in variants (docs/benchmarks/autoscale.md, "Held-out: Alibaba GenAI SD").

Same code and settings as ``gpufleet bench autoscale --cold-start-s 120 --no-oracle``; only gpufleet's config
changes between rows. Usage (from the repo root, data in ../shared/data or $GPUFLEET_DATA):

    PYTHONPATH=src python scripts/autoscale_variants.py sd    # SD whole + 3 busiest models, SLO 2 s and 10 s
    PYTHONPATH=src python scripts/autoscale_variants.py sd-exclusive    # the same, one request per GPU
    PYTHONPATH=src python scripts/autoscale_variants.py llm   # Azure code hour + ServeGen m-large, m-mid, SLO 2 s

Further arguments name the variants to run (default: all).
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from gpufleet.autoscale.throughput import ReplicaThroughputModel
from gpufleet.bench.autoscale import BenchSettings, TraceRun, build_policies, fleet_scaling, run_trace, verdict
from gpufleet.bench.autoscale_requests import RequestColumns, load_request_csv
from gpufleet.bench.autoscale_sim import Queue, simulate
from gpufleet.bench.autoscale_traces import ArrivalTrace, load_traces

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    # issue 21: the static floor's budget (default 0.005); "no_static_floor" is the default before it
    "no_static_floor": {"static_floor_budget": None},
    "static_floor_0": {"static_floor_budget": 0.0},
    "static_floor_0.01": {"static_floor_budget": 0.01},
    # the rows below reproduce the defaults of their time: the static floor (later) is off in them
    "no_slo_budget": {"slo_miss_budget": None, "static_floor_budget": None},  # the default before the SLO budget
    "no_miss_budget": {"zero_miss_budget": None, "slo_miss_budget": None, "static_floor_budget": None},
    # measured before the SLO error budget existed: it is off in them, so they reproduce those rows
    "net_own_work": {"burst_net_own_work": True, "slo_miss_budget": None, "static_floor_budget": None},
    "price_4gpu_no_budget": {
        "zero_miss_budget": None,
        "slo_miss_budget": None,
        "static_floor_budget": None,
        "price_usd_per_replica_h": 27.52,
    },
}


def jobs(which: str, data: Path) -> list[tuple[ArrivalTrace, ReplicaThroughputModel, float]]:
    serving = data / "serving"
    if which in ("sd", "sd-exclusive"):
        sd = serving / "alibaba_genai_sd_request_trace.csv"
        m = ReplicaThroughputModel(gpus_per_replica=1)
        tr = load_request_csv(sd, RequestColumns("gmt_create", "exec_time_seconds"))
        tr += load_request_csv(
            sd,
            RequestColumns("gmt_create", "exec_time_seconds", group_column="checkpoint_model_version_id", top_groups=3),
        )
        return [(t, m, slo) for slo in (2.0, 10.0) for t in tr]
    m = ReplicaThroughputModel()
    tr = load_traces(serving / "AzureLLMInferenceTrace_code.csv", model=m)
    tr += load_traces(serving / "servegen_rate_10min.csv", model=m, seed=0)
    return [(t, m, 2.0) for t in tr]


def main(which: str, names: list[str]) -> None:
    data = Path(os.environ.get("GPUFLEET_DATA", "../shared/data"))
    queue: Queue = "exclusive" if which == "sd-exclusive" else "batched"
    variants = {k: v for k, v in VARIANTS.items() if not names or k in names}
    for t, m, slo in jobs(which, data):
        st = BenchSettings(cold_start_s=120, slo_s=slo, oracle=False, queue=queue)
        t0 = time.time()
        run = run_trace(t, m, st)
        rps = m.rps_per_replica(t.mean_work_s)
        first = t.count[: max(1, round(60.0 / t.step_s))].sum() / 60.0
        init = max(1, math.ceil(first / (st.target_utilization * rps)))  # as run_trace starts gpufleet
        base = run.results["static_peak"].gpu_hours
        others = "; ".join(
            f"{k} {r.gpu_hours:,.1f} GPU-h {r.slo_attainment:.4f}" for k, r in run.results.items() if k != "gpufleet"
        )
        print(f"## {t.trace_id} slo={slo:g}: static_peak = {run.static_replicas} replicas; {others}", flush=True)
        for name, kw in variants.items():
            r = simulate(
                t,
                build_policies(rps, run.static_replicas, st, m.gpus_per_replica, options=kw)["gpufleet"],
                cold_start_s=st.cold_start_s,
                slo_s=slo,
                gpus_per_replica=m.gpus_per_replica,
                initial_replicas=init,
                queue=queue,
                scaling=fleet_scaling(rps, st),
            )
            ok, _ = verdict(TraceRun(t, run.rps_per_replica, run.static_replicas, {**run.results, "gpufleet": r}, {}))
            print(
                f"  {name:18s} GPU-h {r.gpu_hours:10,.1f} ({r.gpu_hours / base:.3f} of static) "
                f"att {r.slo_attainment:.4f} 2nd-half {r.slo_attainment_2nd_half:.4f} cold {r.cold_starts:6d} "
                f"{'PASS' if ok else 'FAIL'}",
                flush=True,
            )
        print(f"  ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sd", sys.argv[2:])
