"""The scheduling stage's two views decide alike: on a fleet of uniform whole-GPU nodes, the simulator's view
(free-GPU index, one score per node state class) picks the node the benchmarks' node-table view picks when ties
go the same way (fewest free GPUs, then the oldest node), for every state-class policy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.scheduling import Bind, FleetScheduler, FreeGpuIndex, Placement, PodAsk
from gpufleet.schedule.classes import CPU_PER_GPU_MILLI, MEM_PER_GPU_MIB, whole_gpu_request
from gpufleet.schedule.table import NodeSpec, NodeTable

PER = 8
MODEL = "h100_80gb"


@settings(max_examples=60, deadline=None)
@given(
    used=st.lists(st.integers(0, PER), min_size=2, max_size=24),
    gpus=st.integers(1, PER),
    policy=st.sampled_from(["bestfit", "packing", "dotprod", "gpufleet"]),
)
def test_class_view_and_table_view_pick_the_same_node(used: list[int], gpus: int, policy: str) -> None:
    specs = [NodeSpec(f"n{i}", PER * CPU_PER_GPU_MILLI, PER * MEM_PER_GPU_MIB, PER, MODEL) for i in range(len(used))]
    table = NodeTable.from_specs(specs)
    index = FreeGpuIndex(1, 1, PER)
    for node, u in enumerate(used):
        if u:
            table.allocate(node, whole_gpu_request(f"u{node}", u, MODEL), tuple(range(u)))
        index.add(node, 0, 0, PER - u)
    free = np.array([PER - u for u in used])
    rank = np.empty(len(used), dtype=np.int64)
    rank[np.lexsort((np.arange(len(used)), free))] = np.arange(len(used))  # fewest free first, then oldest
    rng = np.random.default_rng(0)
    by_table = FleetScheduler.on_table(policy, table, rng, tie_rank=rank)
    by_class = FleetScheduler(policy, [MODEL], [PER], rng)
    ask = PodAsk(0, 0, gpus, PER, (0,), 1, False)
    by_class.observe(ask)
    got_class = by_class.place(ask, index, list(range(len(used))))
    got_table = by_table.place_request(whole_gpu_request("p", gpus, MODEL))
    if not (free >= gpus).any():
        assert not isinstance(got_class, Bind) and not isinstance(got_table, Placement)
        return
    assert isinstance(got_class, Bind) and isinstance(got_table, Placement)
    assert got_class.nodes == (got_table.node,), (free.tolist(), gpus)


def test_a_scheduler_without_a_table_says_so() -> None:
    s = FleetScheduler("bestfit", [MODEL], [PER], np.random.default_rng(0))
    with pytest.raises(ValueError, match="node table"):
        s.place_request(whole_gpu_request("p", 1, MODEL))
