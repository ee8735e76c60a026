"""tune.py WEIGHT SEEDS OUT.jsonl -- judge.py's rows for gpufleet with PlannedRunReserve(shortage_weight=WEIGHT) (0 = off)."""

import json
import sys

from gpufleet.cli.scenario_files import resolve_scenario
from gpufleet.control.planned_runs import PlannedRunReserve
from gpufleet.sim import run as simrun
from gpufleet.sim.compare import run_loops

wt, seeds, out = float(sys.argv[1]), sys.argv[2], sys.argv[3]
orig = simrun.LOOPS["gpufleet"]


def patched(sc, seed):
    loop = orig(sc, seed)
    loop.procurer.planned = PlannedRunReserve(shortage_weight=wt) if wt > 0 else None
    return loop


simrun.LOOPS["gpufleet"] = patched
a, _, b = seeds.partition("-")
sc = resolve_scenario("default")
with open(out, "a") as f:
    for seed in range(int(a), int(b or a) + 1):
        doc = run_loops(sc, seed, ["gpufleet"], bound=False)
        for name, r in doc["loops"].items():
            row = {"seed": seed, "loop": name, "weight": wt}
            row.update({k: v for k, v in r.items() if isinstance(v, (int, float, str)) or v is None})
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(seed, name, round(r["total_cost_usd"]), r["p95_queue_wait_s"], flush=True)
