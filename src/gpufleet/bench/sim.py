"""``gpufleet bench sim``: how fast the engine simulates a large fleet for a long time."""

from __future__ import annotations

import math
import platform
import time
from datetime import UTC, datetime
from typing import Any

from gpufleet import _native
from gpufleet.sim.builtin import steady_scenario
from gpufleet.sim.run import simulate

MIN_JOBS = 1_000_000


def machine() -> str:
    import os

    return f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, Python {platform.python_version()}".strip()


def bench_sim(gpus: int, days: int, seed: int = 7, min_jobs: int = MIN_JOBS) -> dict[str, Any]:
    """Simulate ``days`` of a ``gpus``-GPU steady fleet (the default scenario until issue 16) with at least
    ``min_jobs`` training jobs."""
    per_day = max(350.0 * gpus / 1024, math.ceil(min_jobs * 1.02 / days))
    sc = steady_scenario(gpus=gpus, days=days, seed=seed, jobs_per_day=per_day)
    t0 = time.perf_counter()
    c0 = time.process_time()
    world, result = simulate(sc)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "gpus": gpus,
        "days": days,
        "jobs": result["jobs"]["generated"],
        "events": world.q.processed,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),  # this process's CPU time: robust to other load on the machine
        "events_per_s": round(world.q.processed / wall),
        "jobs_per_s": round(result["jobs"]["generated"] / wall),
        "gpu_utilization": result["gpu_utilization"],
        "cost_conserved": result["cost_conserved"],
        # the compiled hot path (scripts/build_native.py) or, if not built or stale, the same modules from source
        "native": bool(_native.status()["active"]),
        "native_status": str(_native.status()["reason"]),
    }
