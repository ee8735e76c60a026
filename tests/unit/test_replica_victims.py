"""Which replica a fleet stops on scale-down (control/replica_victims.py) and the world asking the loop's rule
(sim/serving.py, a fleet scaling down): Kubernetes' newest-first for the baseline loops, the dearest node first for
gpufleet's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.control.loop import ControlLoop
from gpufleet.control.replica_victims import (
    COST_AWARE,
    DEAREST,
    DEAREST_EMPTIES_NODE,
    KUBERNETES_DEFAULT,
    NEWEST,
    NOT_READY,
    ReplicaView,
    _rank_keys,
    dearest_first,
    deletion_costs,
    newest_first,
    saving_usd_h,
)
from gpufleet.sim.world import World

from .test_serving_fast_path import Fixed, _one_fleet

PRICES = [0.0, 1.25, 2.3728, 2.95, 3.7664, 6.88]  # per GPU-hour, as the scenario's tiers price them

views = st.builds(
    ReplicaView,
    ready=st.booleans(),
    node=st.integers(-1, 5),
    price_usd_h=st.sampled_from(PRICES),
    committed=st.booleans(),
    alone=st.booleans(),
)
fleets = st.lists(views, min_size=1, max_size=30)


@given(fleets)
def test_a_replica_not_ready_goes_before_any_ready_one_under_both_rules(rs: list[ReplicaView]) -> None:
    for rule in (newest_first, dearest_first):
        c = rule(rs)[0]
        if any(not r.ready for r in rs):
            assert not rs[c.index].ready and c.reason == NOT_READY
            assert all(r.ready for r in rs[c.index + 1 :])  # the newest such
        else:
            assert c.reason != NOT_READY


@given(fleets)
def test_the_cost_aware_rule_stops_a_ready_replica_on_the_dearest_node_alone_first_newest_on_ties(
    rs: list[ReplicaView],
) -> None:
    c = dearest_first(rs)[0]
    if any(not r.ready for r in rs):
        return
    chosen = rs[c.index]
    top = max(saving_usd_h(r) for r in rs)
    assert saving_usd_h(chosen) == top
    dearest = [i for i, r in enumerate(rs) if saving_usd_h(r) == top]
    alone = [i for i in dearest if rs[i].alone]
    assert c.index == max(alone or dearest)  # alone on its node first, then the newest
    assert c.reason in (NEWEST, DEAREST, DEAREST_EMPTIES_NODE)
    assert (c.reason == DEAREST_EMPTIES_NODE) == (chosen.alone and c.reason != NEWEST)


@given(fleets)
def test_the_kubernetes_default_stops_the_newest_whatever_its_node_costs(rs: list[ReplicaView]) -> None:
    c = newest_first(rs)[0]
    assert KUBERNETES_DEFAULT.choose(rs)[0] == c
    if all(r.ready for r in rs):
        assert (c.index, c.reason) == (len(rs) - 1, NEWEST)


@given(fleets)
def test_pod_deletion_costs_put_the_cost_aware_choice_first(rs: list[ReplicaView]) -> None:
    costs = deletion_costs(rs)
    assert sorted(costs) == list(range(len(rs)))
    ready = [i for i, r in enumerate(rs) if r.ready]
    assert min(range(len(rs)), key=costs.__getitem__) == dearest_first(rs)[0].index
    for i in range(len(rs)):  # the not-ready pods first, as Kubernetes itself deletes them
        if not rs[i].ready:
            assert all(costs[i] < costs[j] for j in ready)
    for i in ready:
        for j in ready:
            if saving_usd_h(rs[i]) > saving_usd_h(rs[j]):
                assert costs[i] < costs[j]


def test_a_reserved_node_saves_nothing_so_on_demand_then_secondary_go_first() -> None:
    reserved = ReplicaView(True, 0, 2.3728, committed=True, alone=True)
    secondary = ReplicaView(True, 1, 2.95)
    on_demand = ReplicaView(True, 2, 6.88)
    c = COST_AWARE.choose([on_demand, secondary, reserved])[0]
    assert (c.index, c.reason) == (0, DEAREST)
    assert COST_AWARE.choose([secondary, reserved])[0].index == 0
    # equally dear: the one whose node then empties goes, although older
    c = dearest_first([ReplicaView(True, 3, 6.88, alone=True), on_demand])[0]
    assert (c.index, c.reason) == (0, DEAREST_EMPTIES_NODE)
    # nothing tells them apart: Kubernetes' order
    assert dearest_first([on_demand, on_demand])[0].index == 1 and dearest_first([on_demand])[0].reason == NEWEST
    with pytest.raises(ValueError):
        dearest_first([])
    with pytest.raises(ValueError):
        newest_first([])


def test_only_gpufleets_loop_uses_the_cost_aware_rule() -> None:
    assert ControlLoop.gpufleet(1).replica_victims.cost_aware
    assert not ControlLoop.baseline(1).replica_victims.cost_aware
    assert not ControlLoop.common_practice(1).replica_victims.cost_aware


def _spanning_fleet(cost_aware: bool) -> tuple[World, list[str]]:
    """A fleet whose older replicas run on on-demand nodes and newer ones on a reserved node, then scaled down by
    4 replicas; the tiers of the replicas left."""
    sc = _one_fleet()
    loop = ControlLoop.gpufleet(sc.seed)
    loop.replica_victims = COST_AWARE if cost_aware else KUBERNETES_DEFAULT
    pol = Fixed(8, fast=False)
    loop.autoscaler = pol
    w = World(sc, loop)
    fr, f = w.fleets[0], w.scheduling.fleet

    def tiers() -> list[str]:
        return [f.pools[f.n_pool[w.pods.nodes[p][0]]].tier_name for p in fr.pods]

    w.run(until_s=2 * 3600)
    assert tiers() == ["reserved"] * 8
    node = w.pods.nodes[fr.pods[0]][0]
    w.node_events.on_node_fail(w.q.now_s, node, f.n_epoch[node])  # the replicas move to on-demand nodes
    w.run(until_s=4 * 3600)
    w.node_events.on_node_repair(w.q.now_s, node, f.n_epoch[node])
    pol.replicas = 12  # the new replicas take the cheapest running room: the reserved node, back up
    w.run(until_s=6 * 3600)
    assert tiers() == ["on_demand"] * 8 + ["reserved"] * 4 and fr.ready == 12
    pol.replicas = 8
    w.run(until_s=6 * 3600 + 900)
    w.check_invariants()
    return w, tiers()


def test_gpufleets_loop_stops_the_on_demand_replicas_when_a_fleet_spans_tiers() -> None:
    w, left = _spanning_fleet(cost_aware=True)
    assert left == ["on_demand"] * 4 + ["reserved"] * 4  # the reserved node (paid anyway) keeps its replicas
    assert sum(w.serving.victim_reasons.values()) == 4
    assert set(w.serving.victim_reasons) <= {DEAREST, DEAREST_EMPTIES_NODE}
    w, left = _spanning_fleet(cost_aware=False)  # Kubernetes' default: the newest, on the reserved node
    assert left == ["on_demand"] * 8 and set(w.serving.victim_reasons) == {NEWEST}


@given(fleets, st.data())
def test_a_batch_is_ranked_once_the_first_as_the_single_choice_each_replica_once(
    rs: list[ReplicaView], data: st.DataObject
) -> None:
    k = data.draw(st.integers(0, len(rs)))
    for rule, single in ((COST_AWARE, dearest_first), (KUBERNETES_DEFAULT, newest_first)):
        batch = rule.choose(rs, k)
        idx = [c.index for c in batch]
        assert len(idx) == k == len(set(idx))
        if k:
            assert batch[0].index == single(rs)[0].index
        # every replica not ready yet goes before any ready one
        n_not_ready = sum(not r.ready for r in rs)
        assert all(not rs[i].ready for i in idx[: min(k, n_not_ready)])
        assert [c.reason == NOT_READY for c in batch] == [not rs[i].ready for i in idx]
    with pytest.raises(ValueError):
        COST_AWARE.choose(rs, len(rs) + 1)


def reference_ranked(rs: list[ReplicaView], k: int) -> list[tuple[int, str]]:
    """dearest_first as first written (session 13): heapq.nlargest over the ready replicas with a key function."""
    import heapq

    n = len(rs)
    out = [(i, NOT_READY) for i in range(n - 1, -1, -1) if not rs[i].ready][:k]
    m = k - len(out)
    if m <= 0:
        return out
    ready = [i for i in range(n) if rs[i].ready]
    newest = set(ready[-m:])
    for j in heapq.nlargest(m, ready, key=lambda j: (saving_usd_h(rs[j]), rs[j].alone, j)):
        out.append((j, NEWEST if j in newest else DEAREST_EMPTIES_NODE if rs[j].alone else DEAREST))
    return out


@given(st.lists(views, min_size=1, max_size=60), st.data())
def test_the_ranking_of_sorted_keys_is_the_key_function_ranking(rs: list[ReplicaView], data: st.DataObject) -> None:
    """The fast ranking (keys as tuples, ``max`` or one C sort) gives the very choices, in order, with reasons."""
    k = data.draw(st.integers(0, len(rs)))
    assert [(c.index, c.reason) for c in dearest_first(rs, k)] == reference_ranked(rs, k)
    full = [i for i, _ in reference_ranked(rs, len(rs))]  # the rule's whole order: the pod-deletion-costs
    assert deletion_costs(rs) == [full.index(j) for j in range(len(rs))]


@pytest.mark.source_only  # patches the world's internals (tests/conftest.py)
def test_the_worlds_replica_views_are_the_plain_views_over_a_run() -> None:
    """sim/serving.replica_views (named tuples built without their __new__ frame, shared views of replicas
    without a node) equals building each ReplicaView plainly, at every scale-down of a run; so do the rank keys
    the world writes for the cost-aware rule (replica_keys, what the run ranks)."""
    from gpufleet.sim.builtin import default_scenario
    from gpufleet.sim.run import gpufleet_loop

    sc = default_scenario().model_copy(update={"days": 3})
    w = World(sc, gpufleet_loop(sc, sc.seed), seed=sc.seed)
    fast = w.serving.replica_views
    keyed = w.serving.replica_keys
    checked = []

    def plain(fr):  # type: ignore[no-untyped-def]
        f = w.scheduling.fleet
        out = []
        for pod in fr.pods:
            nodes = w.pods.nodes[pod]
            if not nodes:
                out.append(ReplicaView(bool(w.pods.ready[pod])))
                continue
            n = nodes[0]
            alone = all(len(f.n_pods[m]) == 1 for m in nodes)
            out.append(ReplicaView(bool(w.pods.ready[pod]), n, f.pools[f.n_pool[n]].price_usd, f.n_res[n] >= 0, alone))
        got = fast(fr)
        assert got == out and all(type(v) is ReplicaView for v in got)
        keys, not_ready = keyed(fr)
        assert keys == _rank_keys(out) and not_ready == [i for i, v in enumerate(out) if not v.ready]
        checked.append(len(got))
        return keys, not_ready

    w.serving.replica_keys = plain  # type: ignore[method-assign]
    w.run()
    assert len(checked) > 10 and sum(checked) > 100


# --- the same rule on an observed Kubernetes cluster (control/replica_victims.deletion_cost_plan) -----------------

from gpufleet.control.observation import Observation, ObservedNode, ObservedPod  # noqa: E402
from gpufleet.control.replica_victims import (  # noqa: E402
    DELETION_COST,
    deletion_cost_plan,
    deployment_replicas,
    node_price_usd_h,
)
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG  # noqa: E402
from gpufleet.schedule.table import NodeSpec, PodRequest  # noqa: E402

H100 = "NVIDIA-H100-80GB-HBM3"


def _node(name: str, capacity_type: str) -> ObservedNode:
    return ObservedNode(NodeSpec(name, 128_000, 1 << 20, 8, H100), sku=H100, capacity_type=capacity_type)


def _replica(name: str, node: str, created: str, *, ready: bool = True, cost: str = "", owner: str = "llm-5d8f"):
    ann = ((DELETION_COST, cost),) if cost else ()
    return ObservedPod(
        PodRequest(f"ns/{name}", 1000, 1024, 1, 1000), "ns", name, f"uid-{name}", "Running" if ready else "Pending",
        node=node, owner_kind="ReplicaSet", owner_name=owner, created=created, annotations=ann, ready=ready,
    )  # fmt: skip


def test_node_prices_come_from_the_catalog_and_reserved_nodes_are_committed() -> None:
    od, od_committed = node_price_usd_h(_node("a", "on-demand"), BUILTIN_PRICE_CATALOG)
    spot, _ = node_price_usd_h(_node("b", "spot"), BUILTIN_PRICE_CATALOG)
    _, committed = node_price_usd_h(_node("c", "reserved"), BUILTIN_PRICE_CATALOG)
    lp = BUILTIN_PRICE_CATALOG.list_price("h100_80gb")
    assert lp is not None and od == float(lp.on_demand) and spot == float(lp.spot)
    assert committed and not od_committed
    unknown = ObservedNode(NodeSpec("d", 1, 1, 8, "X"), sku="ACME-Z9", capacity_type="on-demand")
    assert node_price_usd_h(unknown, BUILTIN_PRICE_CATALOG) == (0.0, False)


def test_the_deletion_costs_make_kubernetes_stop_the_on_demand_replica_first() -> None:
    nodes = (_node("od-1", "on-demand"), _node("res-1", "reserved"), _node("spot-1", "spot"))
    pods = (
        _replica("llm-5d8f-old", "od-1", "2026-01-01T00:00:00Z"),  # oldest, but on the dearest node
        _replica("llm-5d8f-res", "res-1", "2026-01-02T00:00:00Z"),
        _replica("llm-5d8f-new", "res-1", "2026-01-03T00:00:00Z", cost="7"),  # Kubernetes' default victim
        _replica("llm-5d8f-spot", "spot-1", "2026-01-04T00:00:00Z"),
        _replica("other-9c1a-x", "od-1", "2026-01-01T00:00:00Z", owner="other-9c1a"),  # another Deployment
    )
    obs = Observation(0.0, nodes, pods)
    assert [p.name for p in deployment_replicas(obs, "ns", "llm")] == [
        "llm-5d8f-old", "llm-5d8f-res", "llm-5d8f-new", "llm-5d8f-spot"
    ]  # fmt: skip
    plan = {
        c.pod: c.cost
        for c in deletion_cost_plan(obs, "ns", "llm", lambda n: node_price_usd_h(n, BUILTIN_PRICE_CATALOG))
    }
    # lowest cost is deleted first: the on-demand replica, then spot, then the reserved ones (newest first)
    assert sorted(plan, key=plan.__getitem__) == ["llm-5d8f-old", "llm-5d8f-spot", "llm-5d8f-new", "llm-5d8f-res"]
    # a value already in place is not written again
    again = Observation(0.0, nodes, tuple(
        _replica(p.name, p.node, p.created, cost=str(plan[p.name])) if p.name in plan else p for p in pods
    ))  # fmt: skip
    assert deletion_cost_plan(again, "ns", "llm", lambda n: node_price_usd_h(n, BUILTIN_PRICE_CATALOG)) == ()


def test_a_replica_not_ready_or_not_bound_is_stopped_before_any_ready_one() -> None:
    nodes = (_node("res-1", "reserved"), _node("od-1", "on-demand"))
    pods = (
        _replica("llm-5d8f-a", "od-1", "2026-01-01T00:00:00Z"),
        _replica("llm-5d8f-b", "res-1", "2026-01-02T00:00:00Z", ready=False),  # loading its model
        _replica("llm-5d8f-c", "", "2026-01-03T00:00:00Z", ready=False),  # not bound yet
    )
    plan = {c.pod: c.cost for c in deletion_cost_plan(Observation(0.0, nodes, pods), "ns", "llm",
                                                      lambda n: node_price_usd_h(n, BUILTIN_PRICE_CATALOG))}  # fmt: skip
    assert max(plan["llm-5d8f-b"], plan["llm-5d8f-c"]) < plan["llm-5d8f-a"]
