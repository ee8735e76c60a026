import sys

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
for r in w.desk.reservations:
    print(r.id, r.sku_id, r.units, f"start d {r.start_s / 86400:.1f} end d {r.end_s / 86400:.1f}", r.status.value)
