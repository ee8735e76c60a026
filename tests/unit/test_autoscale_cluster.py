"""The node scaler's scale-down rules (autoscale/cluster.py), with reasons; scale-up is the NodeScaler port's
(tests/unit/test_nodes_payoff.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.cluster import (
    ClusterSnapshot,
    DemandCeiling,
    Node,
    NodeGroup,
    ScaleDownConfig,
    ScaleDownRules,
    cluster_autoscaler_like,
)
from gpufleet.domain.pools import Tier

GROUPS = (
    NodeGroup("h100-res", "h100_80gb", Tier.RESERVED, 8, 4.36, max_nodes=2),
    NodeGroup("h100-od", "h100_80gb", Tier.ON_DEMAND, 8, 6.88, max_nodes=3),
    NodeGroup("h100-spot", "h100_80gb", Tier.SPOT, 8, 1.25, max_nodes=10),
    NodeGroup("h100-neo", "h100_80gb", Tier.SECONDARY, 8, 2.95, max_nodes=4),
)


def _idle_fleet(n: int, launched_s: float = 0.0) -> tuple[Node, ...]:
    return tuple(Node(f"n{i}", "h100-od", 8, (1,), launched_s=launched_s) for i in range(n))


def test_scale_down_waits_for_the_unneeded_time_and_reports_why() -> None:
    ca = ScaleDownRules(cluster_autoscaler_like())
    snap = ClusterSnapshot(GROUPS, _idle_fleet(3))
    assert ca.decide(snap, 0.0).terminations == ()
    assert ca.decide(snap, 599.0).terminations == ()
    d = ca.decide(snap, 600.0)
    # pods of 1 GPU move to the survivors: two of the three nodes can go
    assert len(d.terminations) == 2
    assert {t.reason for t in d.terminations} == {"unneeded_below_threshold"}
    # the survivor takes their pods, so it is held whatever its own load
    assert {h.reason for h in d.holds} <= {"pods_do_not_fit_elsewhere", "takes_pods_of_removed_node"}


def test_forecast_keeps_a_node_needed_before_a_relaunch_would_pay_off() -> None:
    fc = DemandCeiling("h100_80gb", np.array([1_000.0, 2_000.0]), np.array([20.0, 20.0]))
    snap = ClusterSnapshot(GROUPS, _idle_fleet(3), forecasts=(fc,))
    ca = ScaleDownRules(ScaleDownConfig(respect_min_billing=False))
    ca.decide(snap, 0.0)
    d = ca.decide(snap, 700.0)
    assert d.terminations == ()
    assert {h.reason for h in d.holds} == {"forecast_needed_before_payoff"}
    baseline = ScaleDownRules(cluster_autoscaler_like())
    baseline.decide(snap, 0.0)
    assert len(baseline.decide(snap, 700.0).terminations) == 2


def test_min_billing_and_disruption_budget_hold_nodes() -> None:
    snap = ClusterSnapshot(GROUPS, _idle_fleet(4, launched_s=0.0))
    ca = ScaleDownRules(ScaleDownConfig(disruption_budget_nodes=1))
    ca.decide(snap, 0.0)
    d = ca.decide(snap, 1_000.0)  # min billing is one hour
    assert d.terminations == () and {h.reason for h in d.holds} == {"within_min_billing"}
    d = ca.decide(snap, 4_000.0)
    assert len(d.terminations) == 1
    assert "disruption_budget" in {h.reason for h in d.holds}


def _toy_world_launches(ca: ScaleDownRules, *, use_forecast: bool) -> tuple[int, float, int]:
    """Demand of 8-GPU pods alternating 2 <-> 8 pods every 20 min for 6 h.

    Returns (launches, billed node-hours, pod-minutes spent pending); a node is billed at least its minimum
    billing period.
    """
    group = NodeGroup("od", "h100_80gb", Tier.ON_DEMAND, 8, 6.88, node_start_s=600, min_billing_s=3_600)
    nodes: dict[str, tuple[float, float]] = {}  # id -> (launched_s, ready_s)
    launches, billed_s, seq, pending_min = 0, 0.0, 0, 0
    t_grid = np.arange(0.0, 6 * 3_600 + 1, 60.0)
    demand = np.where((t_grid // 1_200) % 2 == 0, 8, 2)
    fc = DemandCeiling("h100_80gb", t_grid, demand * 8.0)
    for t, pods in zip(t_grid.tolist(), demand.tolist(), strict=True):  # Python ints, as the port types
        ready = sorted(i for i, (_, r) in nodes.items() if r <= t)
        placed = min(int(pods), len(ready))
        pending_min += int(pods) - placed
        view = tuple(
            Node(i, "od", 8, (8,) if k < placed else (), ready=nodes[i][1] <= t, launched_s=nodes[i][0])
            for k, i in enumerate(ready + sorted(i for i in nodes if i not in ready))
        )
        waiting = max(0, int(pods) - len(nodes))
        snap = ClusterSnapshot((group,), view, (fc,) if use_forecast else ())
        d = ca.decide(snap, float(t))
        for _ in range(waiting):  # scale-up: a node for each pod that has none (the NodeScaler port's job)
            nodes[f"n{seq}"] = (float(t), float(t) + group.node_start_s)
            seq += 1
            launches += 1
        for term in d.terminations:
            billed_s += max(float(t) - nodes.pop(term.node_id)[0], group.min_billing_s)
    end = float(t_grid[-1]) + 60.0
    billed_s += sum(max(end - launched, group.min_billing_s) for launched, _ in nodes.values())
    return launches, billed_s / 3_600, pending_min


def test_forecast_aware_scale_down_churns_far_fewer_nodes_than_the_ca_baseline() -> None:
    ours = _toy_world_launches(ScaleDownRules(ScaleDownConfig()), use_forecast=True)
    base = _toy_world_launches(ScaleDownRules(cluster_autoscaler_like()), use_forecast=False)
    assert ours[0] <= 0.5 * base[0], (ours, base)  # at least 50% fewer launches
    assert ours[1] <= base[1], (ours, base)  # at equal or lower cost
    assert ours[2] <= base[2], (ours, base)  # and no more waiting


@settings(max_examples=80, deadline=None)
@given(
    pods=st.lists(st.lists(st.sampled_from([1, 2, 4]), max_size=2), min_size=1, max_size=8),  # <= 8 GPUs
    flags=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=8, max_size=8),
    budget=st.integers(0, 4),
)
def test_scale_down_is_safe(pods: list[list[int]], flags: list[tuple[bool, bool]], budget: int) -> None:
    nodes = tuple(
        Node(f"n{i}", "h100-od", 8, tuple(p), ready=flags[i][0], disruptable=flags[i][1], launched_s=0.0)
        for i, p in enumerate(pods)
    )
    ca = ScaleDownRules(cluster_autoscaler_like())
    ca.config = ScaleDownConfig(use_forecast=False, respect_min_billing=False, disruption_budget_nodes=budget)
    snap = ClusterSnapshot(GROUPS, nodes)
    ca.decide(snap, 0.0)
    d = ca.decide(snap, 10_000.0)
    by_id = {n.id: n for n in nodes}
    gone = {t.node_id for t in d.terminations}
    assert len(gone) <= budget  # the disruption budget holds
    for nid in gone:
        n = by_id[nid]
        assert n.ready and n.disruptable and n.gpus_used / n.gpus < 0.5
    # the pods of terminated nodes fit in the free GPUs of the surviving ready nodes
    moved = sum(by_id[nid].gpus_used for nid in gone)
    spare = sum(n.gpus - n.gpus_used for n in nodes if n.id not in gone and n.ready)
    assert moved <= spare
    # every decision about a candidate carries a reason
    assert all(h.reason for h in d.holds) and all(t.reason for t in d.terminations)
