import sys
import numpy as np
from gpufleet.cli.scenario_files import resolve_scenario
from gpufleet.sim.run import LOOPS
from gpufleet.sim.world import World
seed = int(sys.argv[1])
sc = resolve_scenario("default")
w = World(sc, LOOPS["gpufleet"](sc, seed), seed=seed)
w.run()
p = w.pods
for i in range(p.n_jobs):
    g = p.group[i] if hasattr(p, "group") else ""
    if str(g).startswith("planned"):
        print(g, "arrive d", p.arrival[i] / 86400, "first start d", p.first_start[i] / 86400)
for d in w.decisions.rows if hasattr(w.decisions, "rows") else []:
    pass
for r in w.desk.reservations:
    print(r.id, r.sku_id, r.units, "start d %.1f end d %.1f" % (r.start_s / 86400, r.end_s / 86400), r.status.value)
