"""Review (telemetry2): the node release planner (control/node_release.py ``NodeReleasePlanner``) and the loop's node
scaler it asks (autoscale/nodes_payoff.py ``PayoffAwareNodes``, ``NeedCounts``) over a long-running controller's
observations: nodes that churn, a wall clock that steps back, and observation times that are not whole seconds."""

from __future__ import annotations

from gpufleet.autoscale.nodes_payoff import NeedCounts, PayoffAwareNodes
from gpufleet.control.node_release import FORGET_AFTER_S, NodeReleasePlanner
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.schedule.table import NodeSpec, PodRequest
from tests.unit.test_node_release import Recorder

H100 = "NVIDIA-H100-80GB-HBM3"
T0 = 1_800_000_000.0


def node(name: str) -> ObservedNode:
    return ObservedNode(NodeSpec(name, 192_000, 2_000_000, 8, H100), sku=H100, capacity_type="on-demand",
                        node_pool="on-demand", created_s=T0 - 3600)  # fmt: skip


def busy(name: str, on: str) -> ObservedPod:
    return ObservedPod(PodRequest(f"ml/{name}", 1000, 1024, 8, 1000), "ml", name, f"uid-{name}", "Running", node=on)


def test_the_planners_memory_does_not_grow_with_every_node_name_ever_seen() -> None:
    """Review (fixed), the defect: the planner gives each node name a stable id (``_ids``, ``_names``) and remembers every
    launched node it has seen (``_seen``, to count the nodes that joined since the last plan). Karpenter names each
    node it launches anew (``ip-10-1-2-3...``, ``default-x7k2p``) and a name never comes back, so a controller that
    runs for months kept one entry per node ever launched, three times over. Now a node not observed for
    ``FORGET_AFTER_S`` (an hour) is forgotten; a node's id stays stable while it is observed."""
    planner = NodeReleasePlanner(Recorder(), BUILTIN_PRICE_CATALOG)
    for k in range(500):  # two nodes at a time, each living for two plans (a busy one, an idle one)
        a, b = f"n-{k}", f"n-{k + 1}"
        planner.plan(Observation(T0 + 60 * k, (node(a), node(b)), (busy("p", a),)))
    keep = FORGET_AFTER_S // 60 + 2  # the names observed within the last hour
    assert len(planner._seen or ()) <= keep
    assert len(planner._ids) <= keep and len(planner._names) <= keep and len(planner._observed) <= keep
    assert len(planner._idle_since) <= 2


def test_a_nodes_id_is_stable_while_it_is_observed() -> None:
    planner = NodeReleasePlanner(Recorder(), BUILTIN_PRICE_CATALOG)
    ids = []
    for k in range(3):
        planner.plan(Observation(T0 + 700 * k, (node("keep"), node(f"churn-{k}")), ()))
        ctx = planner.contexts(Observation(T0 + 700 * k, (node("keep"), node(f"churn-{k}")), ()), min_idle_s=0)[0]
        ids.append({planner.node_name(i.node_id): i.node_id for i in ctx.idle}["keep"])
    assert len(set(ids)) == 1


def test_a_wall_clock_stepped_back_neither_makes_idle_time_negative_nor_restarts_it() -> None:
    """Review (fixed), the defect: a node's idle time is ``obs.now_s`` (the controller's wall clock) less when it was first
    seen idle. The wall clock stepped back an hour (NTP) ten minutes into an idle spell: the planner offered the
    scaler the node idle for -50 minutes, and the context's ``now_s`` went back an hour, so the scaler's own
    records (the spell's end, its need counts) saw time run backwards. The planner now measures durations on a
    clock that never goes back (the monotonic reading the controller passes, else the observation's time clamped
    to never go back): the spell keeps its ten minutes, and the scaler's ``now_s`` does not go back."""
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    planner.plan(Observation(T0, (node("idle"),), ()))
    planner.plan(Observation(T0 + 600, (node("idle"),), ()))
    assert rec.asked[-1].now_s == int(T0 + 600) and rec.asked[-1].idle[0].idle_for_s == 600
    planner.plan(Observation(T0 + 600 - 3600 + 60, (node("idle"),), ()))  # stepped back an hour, a minute later
    ctx = planner.contexts(Observation(T0 + 600 - 3600 + 60, (node("idle"),), ()), min_idle_s=0)[0]
    (i,) = ctx.idle
    assert i.idle_for_s >= 600
    assert all(a.now_s >= int(T0 + 600) for a in rec.asked[2:])


def test_a_node_reused_after_the_clock_stepped_back_does_not_crash_the_release_round() -> None:
    """Review (fixed), the defect: with the loop's scaler, a node idle for ten minutes that takes a pod after the clock
    stepped back an hour closes its idle spell at a time before the spell began; ``IdleSpells.add`` refuses a
    negative duration (ValueError), so ``plan`` raised and the controller's release round failed, every round,
    until the wall clock caught up with the spell's start."""
    scaler = PayoffAwareNodes.default()
    planner = NodeReleasePlanner(scaler, BUILTIN_PRICE_CATALOG)
    planner.plan(Observation(T0, (node("idle"),), ()))
    planner.plan(Observation(T0 + 600, (node("idle"),), ()))
    planner.plan(Observation(T0 + 600 - 3600 + 60, (node("idle"),), (busy("p", "idle"),)))  # reused, clock back
    assert scaler.spells["on-demand"].reuses == 1


def test_need_counts_stay_right_when_the_clock_steps_back() -> None:
    """Review (fixed), the defect: ``NeedCounts`` appends each need at its ``now_s`` and bisects the times as if ascending.
    A need recorded after the clock stepped back sits before the earlier ones: five nodes needed at T and two a
    moment later (stamped an hour earlier) read as one needed in the last span, so the scaler's hold cap let idle
    nodes go that the recent need said to keep. Times that go back are now clamped to the last one."""
    needs = NeedCounts()
    needs.watch(0)
    needs.add(100_000, 5)
    needs.add(100_010 - 3600, 1)  # ten seconds later, the clock an hour behind
    needs.add(100_020 - 3600, 1)
    assert needs.within(97_415, 1000) == 7  # all seven needed within the last minute (real time)


def test_an_idle_node_observed_at_fractional_times_is_one_spell_and_no_need() -> None:
    """Review (fixed), the defect (found here): the context gives the scaler ``now_s = int(now)`` and each idle node's
    ``idle_for_s = int(now - since)``, each truncated on its own; the scaler keeps a spell open while ``now_s -
    idle_for_s`` equals the spell's start. With the controller's wall clock (fractions of a second), that difference
    moves by one second on about half the plans: the scaler closed the spell as if the node had been reused,
    counted a fresh-node need for its product and opened a new spell. One node idle for an hour made dozens of
    needs (inflating the hold cap: idle nodes held longer than the rent-or-buy rule says) and as many short
    reused spells. Now both are whole seconds of the same instant."""
    scaler = PayoffAwareNodes.default()
    planner = NodeReleasePlanner(scaler, BUILTIN_PRICE_CATALOG)
    t = T0 + 0.37
    for k in range(60):
        planner.plan(Observation(t + 60 * k + (k * 0.29) % 1, (node("idle"), node("work")), (busy("p", "work"),)))
    need = scaler.needs.get(H100)
    assert need is None or need.within(int(t + 3600), 3000) in (None, 0)
    spells = scaler.spells.get("on-demand")
    assert spells is None or spells.reuses == 0


def test_with_a_steady_reading_a_clock_stepped_either_way_does_not_age_an_idle_node() -> None:
    """The controller passes ``time.monotonic()`` with each observation: idle time follows it, not the wall clock's
    steps (forward an hour: the node is not an hour idler; back an hour: not an hour younger)."""
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    planner.plan(Observation(T0, (node("idle"),), ()), steady_s=100.0)
    planner.plan(Observation(T0 + 3600 + 60, (node("idle"),), ()), steady_s=160.0)  # stepped forward an hour
    ctx = planner.contexts(Observation(T0 - 3600 + 120, (node("idle"),), ()), min_idle_s=0, steady_s=220.0)[0]
    assert [i.idle_for_s for i in ctx.idle] == [120]
    assert ctx.now_s == int(T0 + 120)
