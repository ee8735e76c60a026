"""The simulator's decision log: bounded, recorded where the world applies decisions, reasons from the decisions."""

from __future__ import annotations

import json
import re
from collections import Counter

from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import Tier
from gpufleet.ports import ProcurementContext, ReservationProposal
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.decisions import DAY_S, DecisionLog, split_reason
from gpufleet.sim.run import gpufleet_loop, simulate

POOL = next(p for p in default_pools("h100_80gb", "us-east-1") if p.tier is Tier.ON_DEMAND)


def _count(entry: dict[str, object]) -> int:
    m = re.match(r"^([\d,]+) ", str(entry["detail"]))
    assert m, entry
    return int(m.group(1).replace(",", ""))


def test_a_reason_is_split_into_its_code_and_its_words() -> None:
    assert split_reason("breakeven: 96 GPUs above 64 committed") == (
        "breakeven",
        "breakeven: 96 GPUs above 64 committed",
    )
    assert split_reason("idle_past_unneeded_time") == ("idle_past_unneeded_time", "idle_past_unneeded_time")
    assert split_reason("  ") == ("unspecified", "")


def test_the_log_stays_bounded_and_coarsening_keeps_the_totals() -> None:
    log = DecisionLog(limit=50)
    for day in range(400):
        for reason in ("a", "b", "c"):
            log.add(day * DAY_S + 5, "place", "scale_up", reason, POOL, 8, count=1)
    rows = log.entries()
    assert len(rows) <= 50
    assert {k for k in rows[0]} == {"t_s", "day", "stage", "action", "reason", "sku", "region", "gpus", "usd", "detail"}
    by_reason: Counter[str] = Counter()
    nodes: Counter[str] = Counter()
    for r in rows:
        by_reason[r["reason"]] += r["gpus"]
        nodes[r["reason"]] += _count(r)
    assert by_reason == {"a": 3200, "b": 3200, "c": 3200}  # nothing lost by adding up per week or month
    assert nodes == {"a": 400, "b": 400, "c": 400}
    assert [r["t_s"] for r in rows] == sorted(r["t_s"] for r in rows)


def test_one_by_one_entries_are_capped_and_counted() -> None:
    log = DecisionLog(limit=10)
    for i in range(20):
        log.record(i * DAY_S, "procure", "bought", f"why_{i}: because", sku="h100_80gb", gpus=8)
    assert len(log.entries()) == 5 and log.dropped == 15


class NamedProcurer:
    """Proposes one node of the SKU it sees first, once, with a reason of its own."""

    def __init__(self) -> None:
        self.done = False

    def propose(self, ctx: ProcurementContext) -> list[ReservationProposal]:
        if self.done or ctx.sku_id != "h100_80gb":
            return []
        self.done = True
        start = ctx.now_s + ctx.pool.lead_time_s
        return [ReservationProposal(ctx.sku_id, ctx.pool.id, 8, start, 12, "test_reason: one node, as a test")]


def test_a_run_logs_what_its_stages_decided_with_their_own_reasons() -> None:
    sc = default_scenario(gpus=128, days=9, seed=3)
    loop = gpufleet_loop(sc, sc.seed)
    loop.procurer = NamedProcurer()
    w, r = simulate(sc, loop=loop)
    log = r["decisions"]
    json.dumps(log, allow_nan=False)  # plain JSON
    bought = [d for d in log if d["stage"] == "procure" and d["action"] in ("bought", "ordered")]
    assert len(bought) == 1
    assert bought[0]["reason"] == "test_reason" and bought[0]["detail"] == "test_reason: one node, as a test"
    assert bought[0]["gpus"] == 8 and bought[0]["sku"] == "h100_80gb" and bought[0]["region"] == "us-east-1"
    assert bought[0]["usd"] is not None and bought[0]["usd"] > 0
    # launches in the log are the launches the fleet counted; scale-down reasons are the node scaler's
    launched = sum(_count(d) for d in log if d["action"] in ("scale_up", "fallback"))
    assert launched == r["node_launches"] > 0
    downs = Counter({d["reason"]: 0 for d in log if d["action"] == "scale_down"})
    for d in log:
        if d["action"] == "scale_down":
            downs[d["reason"]] += _count(d)
    assert {f"terminate_{k}": v for k, v in downs.items()} == {
        k: v for k, v in r["placements"].items() if k.startswith("terminate_")
    }
    assert sum(_count(d) for d in log if d["action"] == "preempt") == r["scheduler"]["preemptions"]
    assert sum(_count(d) for d in log if d["action"] == "move") == r["node_moves"]
    assert sum(_count(d) for d in log if d["action"] == "drain") == r["scheduler"]["drained_nodes"]
    # series for people: days, and the cost so far ends at the total
    s = r["series"]
    assert len(s["days"]) == s["hours"] and s["days"][24] == 1.0
    assert abs(s["cost_usd"][-1] - r["total_cost_usd"]) < 0.05
    assert all(b >= a for a, b in zip(s["cost_usd"], s["cost_usd"][1:], strict=False))
    for f in s["serving"].values():
        assert len(f["need"]) == s["hours"]
    w.check_invariants()
