"""Count the instructions of a window of the year's `bench sim` world under callgrind.

Runs `steady_scenario(gpus, days=365, seed=7, jobs_per_day)` as `bench sim --gpus GPUS --days 365` builds it,
silently (instrumentation off) up to day START, then switches callgrind's instrumentation on for days
START..END and off again, prints the events of the window, and leaves with ``os._exit`` (no teardown counted).

    PYTHONHASHSEED=0 PYTHONPATH=src valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file=/tmp/cg.%p python scripts/callgrind_window.py 20 23

The instructions of the window are the ``summary``/``totals`` line of the output file (``callgrind_annotate``).
Without valgrind (``--plain``) it times the window in CPU seconds instead.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time

from gpufleet.bench.sim import MIN_JOBS
from gpufleet.sim.builtin import steady_scenario
from gpufleet.sim.run import gpufleet_loop
from gpufleet.sim.world import World

DAY_S = 86_400


def _instr(on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], check=True, capture_output=True
    )


class _Sampler:
    """A ``setitimer(ITIMER_PROF)`` stack sampler: self and inclusive counts per Python function."""

    def __init__(self, every_us: int) -> None:
        import collections
        import signal

        self.self_n: collections.Counter[str] = collections.Counter()
        self.incl_n: collections.Counter[str] = collections.Counter()
        self.n = 0
        signal.signal(signal.SIGPROF, self._on)
        signal.setitimer(signal.ITIMER_PROF, every_us / 1e6, every_us / 1e6)

    def _on(self, _sig: int, frame: object) -> None:
        self.n += 1
        seen = set()
        f = frame
        first = True
        while f is not None:
            co = f.f_code  # type: ignore[attr-defined]
            name = f"{co.co_filename.rsplit('/src/', 1)[-1]}:{co.co_name}"
            if first:
                self.self_n[name] += 1
                first = False
            if name not in seen:
                seen.add(name)
                self.incl_n[name] += 1
            f = f.f_back  # type: ignore[attr-defined]

    def stop(self) -> None:
        import signal

        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        print(f"{self.n} samples; self:")
        for k, v in self.self_n.most_common(45):
            print(f"  {100 * v / self.n:5.1f}%  {k}")
        print("inclusive:")
        for k, v in self.incl_n.most_common(70):
            print(f"  {100 * v / self.n:5.1f}%  {k}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("start", type=float, help="first day of the window")
    ap.add_argument("end", type=float, help="last day of the window")
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=365, help="the scenario's horizon (the year)")
    ap.add_argument("--plain", action="store_true", help="no callgrind: time the window (CPU s)")
    ap.add_argument("--sample", type=int, default=0, help="no callgrind: sample the stack every N us, print the top")
    a = ap.parse_args()
    per_day = max(350.0 * a.gpus / 1024, math.ceil(MIN_JOBS * 1.02 / a.days))
    sc = steady_scenario(gpus=a.gpus, days=a.days, seed=7, jobs_per_day=per_day)
    world = World(sc, gpufleet_loop(sc, sc.seed), seed=sc.seed)
    world.run(until_s=int(a.start * DAY_S))
    e0 = world.q.processed
    if a.sample:
        a.plain = True
        prof = _Sampler(a.sample)
    if not a.plain:
        _instr(True)
    c0 = time.process_time()
    world.run(until_s=int(a.end * DAY_S))
    cpu = time.process_time() - c0
    if a.sample:
        prof.stop()
    if not a.plain:
        _instr(False)
    print(f"window days {a.start}-{a.end}: {world.q.processed - e0} events, {cpu:.2f} CPU s", flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
