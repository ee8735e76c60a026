"""Placement core: node table semantics, FGD fragmentation, baseline scoring on tiny clusters."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.frag import FragModel, WorkloadDistribution, fgd_typical_pods
from gpufleet.schedule.policies import BestFitPolicy, ClusteringPolicy, DotProdPolicy, PackingPolicy
from gpufleet.schedule.scheduler import Infeasible, Placement, Scheduler, make_policy
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest


def _table(*gpus: int, cpu: int = 64_000, mem: int = 262_144) -> NodeTable:
    return NodeTable.from_specs([NodeSpec(f"n{i}", cpu, mem, g, "A100" if g else "") for i, g in enumerate(gpus)])


def test_fractional_pods_share_one_gpu_and_whole_gpu_pods_need_free_gpus() -> None:
    t = _table(2)
    s = Scheduler(t, BestFitPolicy(), np.random.default_rng(0))
    a = s.place(PodRequest("a", 1000, 1024, 1, 600))
    b = s.place(PodRequest("b", 1000, 1024, 1, 400))
    assert isinstance(a, Placement) and isinstance(b, Placement)
    assert a.gpu_slots == b.gpu_slots  # best-fit GPU: the 400 fills the GPU the 600 started
    c = s.place(PodRequest("c", 1000, 1024, 2, 1000))
    assert isinstance(c, Infeasible) and c.reason == "insufficient_gpu"
    assert isinstance(s.place(PodRequest("d", 1000, 1024, 1, 1000)), Placement)
    t.check_invariants()


def test_cpu_and_memory_must_fit_and_the_reason_says_which() -> None:
    t = _table(8, cpu=10_000, mem=1000)
    s = Scheduler(t, BestFitPolicy(), np.random.default_rng(0))
    r1 = s.place(PodRequest("cpu", 20_000, 10, 1, 1000))
    r2 = s.place(PodRequest("mem", 1000, 5000, 1, 1000))
    assert isinstance(r1, Infeasible) and r1.reason == "insufficient_cpu"
    assert isinstance(r2, Infeasible) and r2.reason == "insufficient_memory"


def test_gpu_model_constraint_filters_nodes() -> None:
    t = NodeTable.from_specs([NodeSpec("t4", 64_000, 65_536, 2, "T4"), NodeSpec("v100", 64_000, 65_536, 8, "V100")])
    s = Scheduler(t, PackingPolicy(), np.random.default_rng(0))
    r = s.place(PodRequest("p", 1000, 1000, 1, 1000, ("V100",)))
    assert isinstance(r, Placement) and r.node_name == "v100"
    bad = s.place(PodRequest("q", 1000, 1000, 1, 1000, ("H100",)))
    assert isinstance(bad, Infeasible) and bad.reason == "no_node_with_gpu_model_and_count"


def test_invalid_request_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        PodRequest("x", 1000, 1000, 2, 500).validate()


def test_fragment_counts_gpus_too_small_for_a_shape_and_whole_node_when_it_cannot_fit() -> None:
    t = _table(2)
    dist = WorkloadDistribution.from_counts({(1000, 500, 1, 0, ()): 1.0, (1000, 1000, 2, 0, ()): 1.0})
    m = FragModel.build(dist, t)
    state = np.array([[300, 1000]], dtype=np.int32)  # GPU0 has 300 left, GPU1 idle
    got = m.amount(state, np.array([64_000]), np.array([0]), np.array([0]))
    # 0.5-GPU shape: GPU0 (300 < 500) is a fragment -> 300; 2-GPU shape cannot fit -> all 1300 left
    assert got[0] == pytest.approx(0.5 * 300 + 0.5 * 1300)


def test_fgd_typical_pods_keep_most_popular_shapes_up_to_the_threshold() -> None:
    pods = [PodRequest(f"a{i}", 1000, 1, 1, 500) for i in range(90)]
    pods += [PodRequest(f"b{i}", 2000, 1, 1, 1000) for i in range(8)]
    pods += [PodRequest(f"c{i}", 3000, 1, 2, 1000) for i in range(2)]
    d = fgd_typical_pods(pods, popularity_threshold_pct=95.0)
    assert d.n_shapes == 2 and d.prob.sum() == pytest.approx(1.0)
    assert list(d.gpu_milli) == [500, 1000]


def test_fgd_prefers_the_placement_that_fragments_least() -> None:
    t = _table(8, 8)
    t.allocate(1, PodRequest("x", 1000, 1, 1, 500), (0,))  # node 1 has a half-used GPU
    pods = [PodRequest(f"s{i}", 1000, 1, 1, 500) for i in range(10)]
    s = Scheduler(t, make_policy("fgd", t, fgd_typical_pods(pods)), np.random.default_rng(0))
    r = s.place(PodRequest("y", 1000, 1, 1, 500))
    assert isinstance(r, Placement) and (r.node, r.gpu_slots) == (1, (0,))


@pytest.mark.parametrize("policy", [DotProdPolicy(), BestFitPolicy(), PackingPolicy(), ClusteringPolicy()])
def test_packing_style_baselines_fill_the_used_node_before_an_idle_one(policy: object) -> None:
    t = _table(8, 8)
    t.allocate(0, PodRequest("x", 1000, 1, 4, 1000), (0, 1, 2, 3))
    s = Scheduler(t, policy, np.random.default_rng(0))  # type: ignore[arg-type]
    r = s.place(PodRequest("y", 1000, 1, 4, 1000))
    assert isinstance(r, Placement) and r.node == 0


def test_gpufleet_learns_only_from_requests_it_has_seen() -> None:
    t = _table(8, 8)
    pol = make_policy("gpufleet", t)
    s = Scheduler(t, pol, np.random.default_rng(0))
    assert isinstance(s.place(PodRequest("a", 1000, 1, 1, 300)), Placement)
    model = pol.model  # type: ignore[attr-defined]
    assert model is not None and model.dist.n_shapes == 1  # one shape seen, one shape known


def test_node_selector_and_taints_filter_nodes_and_the_reason_says_so() -> None:
    t = NodeTable.from_specs(
        [
            NodeSpec("plain", 64_000, 65_536, 8, "A100"),
            NodeSpec("rdma", 64_000, 65_536, 8, "A100", labels=("nic=rdma",)),
            NodeSpec("reserved", 64_000, 65_536, 8, "A100", labels=("nic=rdma",), taints=("team=infra",)),
        ]
    )
    s = Scheduler(t, BestFitPolicy(), np.random.default_rng(0))
    r = s.place(PodRequest("a", 1000, 1, 8, 1000, node_selector=("nic=rdma",)))
    assert isinstance(r, Placement) and r.node_name == "rdma"  # "reserved" is tainted
    r2 = s.place(PodRequest("b", 1000, 1, 8, 1000, node_selector=("nic=rdma",), tolerations=("team=infra",)))
    assert isinstance(r2, Placement) and r2.node_name == "reserved"
    r3 = s.place(PodRequest("c", 1000, 1, 1, 1000, node_selector=("zone=b",)))
    assert isinstance(r3, Infeasible) and r3.reason == "no_node_matches_selector_or_tolerations"
