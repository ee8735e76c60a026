"""Consolidation decisions on hand-made observations: serving and high-priority pods pin their node."""

from __future__ import annotations

import dataclasses

from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.control.reclaim import plan_reclaim
from gpufleet.schedule.table import NodeSpec, PodRequest


def _node(name: str) -> ObservedNode:
    return ObservedNode(NodeSpec(name, 64_000, 512 * 1024, 8, "H100"))


def _pod(name: str, node: str, gpus: int, kind: str = "training", prio: int = 0, owner: str = "") -> ObservedPod:
    req = PodRequest(f"ns/{name}", 1000, 1024, gpus, 1000)
    return ObservedPod(req, "ns", name, f"u-{name}", "Running", node=node, kind=kind, priority=prio,
                       checkpointable=kind == "training", owner_kind=owner)  # fmt: skip


def test_small_training_node_drains_onto_a_fuller_one() -> None:
    obs = Observation(0.0, (_node("a"), _node("b")), (_pod("s", "a", 1), _pod("big", "b", 5)))
    plan = plan_reclaim(obs, 1000)
    assert [(d.node, d.evict, d.checkpoint_first) for d in plan.drains] == [("a", ("ns/s",), ("ns/s",))]


def test_serving_priority_gate_and_daemons() -> None:
    base = [_node("a"), _node("b"), _node("c")]
    pods = (_pod("srv", "a", 1, kind="serving"), _pod("crit", "b", 1, prio=2_000_000_000), _pod("big", "c", 8),
            _pod("ds", "c", 0, owner="DaemonSet"))  # fmt: skip
    plan = plan_reclaim(Observation(0.0, tuple(base), pods), 1000)
    assert plan.drains == ()
    assert ("a", "latency_sensitive") in plan.skipped and ("b", "priority_gate") in plan.skipped
    low = dataclasses.replace(pods[1], priority=10)
    plan = plan_reclaim(Observation(0.0, tuple(base), (pods[0], low, pods[2], pods[3])), 1000)
    assert [d.node for d in plan.drains] == ["b"]
