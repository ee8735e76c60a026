"""waits by 10-day bin for gpufleet on one seed: share of jobs waiting >=600 s and >600 s."""

import sys

import numpy as np

from gpufleet.cli.scenario_files import resolve_scenario
from gpufleet.sim.run import LOOPS
from gpufleet.sim.world import World

seed = int(sys.argv[1])
loopn = sys.argv[2] if len(sys.argv) > 2 else "gpufleet"
sc = resolve_scenario("default")
w = World(sc, LOOPS[loopn](sc, seed), seed=seed)
w.run()
p = w.pods
n = p.n_jobs
arr = np.asarray(p.arrival[:n])
first = np.asarray(p.first_start[:n])
m = np.asarray(p.state[:n]) != 0
wait = np.where(first >= 0, first - arr, w.horizon_s - arr)[m]
arr = arr[m]
print(
    "p95", np.percentile(wait, 95), "n", len(wait), "share>=600", (wait >= 600).mean(), "share>600", (wait > 600).mean()
)
day = arr // 86400
for b in range(0, 180, 10):
    s = (day >= b) & (day < b + 10)
    print(
        f"days {b:3d}-{b + 9:3d} jobs {s.sum():5d} >=600 {(wait[s] >= 600).sum():4d} >600 {(wait[s] > 600).sum():4d} >3600 {(wait[s] > 3600).sum():4d}"
    )
