"""``gpufleet bench procure-sim``: the built-in scenario under the baseline loop, the gpufleet loop, and the
gpufleet loop with the break-even procurer (:class:`gpufleet.procure.online.BreakevenProcurer`), same seed.
"""

from __future__ import annotations

from typing import Any

from gpufleet.control.loop import ControlLoop
from gpufleet.procure.online import BreakevenProcurer
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.compare import compare, key_figures
from gpufleet.sim.run import baseline_loop, gpufleet_loop
from gpufleet.sim.scenario import Scenario


def breakeven_loop(sc: Scenario, seed: int) -> ControlLoop:
    loop = gpufleet_loop(sc, seed)
    loop.name = "gpufleet+breakeven_procurer"
    loop.procurer = BreakevenProcurer()
    return loop


def run(*, seed: int | None = None, days: int | None = None) -> dict[str, Any]:
    sc = default_scenario()
    if days is not None:
        sc = sc.model_copy(update={"days": days})
    res = compare(
        sc, {"baseline": baseline_loop, "gpufleet": gpufleet_loop, "gpufleet+breakeven": breakeven_loop}, seed=seed
    )
    figs = {k: key_figures(v) for k, v in res.items()}
    base = figs["baseline"]["total_cost_usd"]
    for f in figs.values():
        f["cost_vs_baseline"] = round(f["total_cost_usd"] / base, 5) if base else None
    return {"scenario": "default", "days": sc.days, "loops": figs}
