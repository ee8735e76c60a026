"""The binpack endpoint's moves come from the scheduler's planner and stay consistent."""

from __future__ import annotations

from gpufleet.control.packing import NodeLoad, WorkloadTraits, suggest_moves


def test_binpack_never_reports_freed_a_node_that_received_work() -> None:
    loads = [NodeLoad("a", 8, [("w0", 1)]), NodeLoad("b", 2, [("w1", 1)]), NodeLoad("c", 8, [("w2", 3)])]
    traits = {w: WorkloadTraits(latency_sensitive=False, checkpointable=True) for w in ("w0", "w1", "w2")}
    moves, freed, skipped = suggest_moves(loads, traits, now_s=0)
    assert [(m["workload_id"], m["from_node"], m["to_node"], m["gpus"]) for m in moves] == [("w0", "a", "b", 1)]
    assert freed == ["a"]
    assert {"node": "b", "reason": "received_pods"} in skipped
    assert {"node": "c", "reason": "no_room_elsewhere"} in skipped


def test_binpack_keeps_the_service_skip_reasons_and_leaves_overcommitted_nodes_alone() -> None:
    loads = [
        NodeLoad("a", 8, [("serve", 1)]),
        NodeLoad("b", 8, [("nockpt", 1)]),
        NodeLoad("c", 8, [("ghost", 1)]),
        NodeLoad("d", 2, [("t", 3)]),
        NodeLoad("e", 8, [("big", 8)]),
    ]
    traits = {
        "serve": WorkloadTraits(latency_sensitive=True, checkpointable=False),
        "nockpt": WorkloadTraits(latency_sensitive=False, checkpointable=False),
        "t": WorkloadTraits(latency_sensitive=False, checkpointable=True),
        "big": WorkloadTraits(latency_sensitive=False, checkpointable=True),
    }
    moves, freed, skipped = suggest_moves(loads, traits, now_s=0)
    reasons = {s["node"]: s["reason"] for s in skipped}
    assert moves == [] and freed == []
    assert reasons["a"] == "latency_sensitive" and reasons["b"] == "not_checkpointable"
    assert reasons["c"] == "unknown_workload" and reasons["d"] == "over_capacity"
    assert reasons["e"] == "no_room_elsewhere"
    assert suggest_moves([], {}, now_s=0) == ([], [], [])
