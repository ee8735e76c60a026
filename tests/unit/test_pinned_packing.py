"""Packing pods pinned to GPU models: the neutral fragment reading, pin pressure, and the derived lists."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.bench.binpack_pins import PinVariant, pin_models
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.frag import FragModel, WorkloadDistribution
from gpufleet.schedule.fragpolicy import GpufleetPolicy
from gpufleet.schedule.pin_pressure import PinPressure
from gpufleet.schedule.scheduler import Placement, Scheduler
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest

MODELS = ("G2", "T4", "V100")


def _nodes(counts: dict[str, tuple[int, int]], cpu: int = 96_000, mem: int = 393_216) -> list[NodeSpec]:
    """``{model: (nodes, gpus per node)}``; nodes listed model by model."""
    return [NodeSpec(f"{m}-{i}", cpu, mem, g, m) for m, (n, g) in counts.items() for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=2, max_size=5),
    shapes=st.lists(
        st.tuples(st.sampled_from([1000, 4000, 16000]), st.sampled_from([250, 500, 1000]), st.integers(1, 2)),
        min_size=1,
        max_size=4,
    ),
    fill=st.lists(st.floats(0.0, 1.0), min_size=8, max_size=8),
    capacity=st.sampled_from(["none", "ratio"]),
)
def test_with_no_pinned_shape_the_neutral_reading_is_fgds_to_the_bit(
    gpus: list[int], shapes: list[tuple[int, int, int]], fill: list[float], capacity: str
) -> None:
    t = NodeTable.from_specs([NodeSpec(f"n{i}", 64_000, 262_144, g, MODELS[i % 3]) for i, g in enumerate(gpus)])
    dist = WorkloadDistribution.from_counts(
        {(c, g if n == 1 else 1000, n, 1024, ()): 1.0 + i for i, (c, g, n) in enumerate(shapes)}
    )
    kw = {"use_memory": True, "include_cpu_shapes": False, "capacity": capacity}
    fgd = FragModel.build(dist, t, model_access="fragment", **kw)  # type: ignore[arg-type]
    neutral = FragModel.build(dist, t, model_access="neutral", **kw)  # type: ignore[arg-type]
    nodes = np.arange(t.n_nodes)
    left = (t.gpu_left_milli * np.resize(np.array(fill), t.gpu_left_milli.shape)).astype(np.int32)
    cpu = t.cpu_left_milli // 3
    mem = t.mem_left_mib // 2
    assert np.array_equal(fgd.amount(left, cpu, mem, nodes), neutral.amount(left, cpu, mem, nodes))


def test_a_shape_barred_from_a_model_weighs_nothing_on_its_nodes_in_the_neutral_reading() -> None:
    t = NodeTable.from_specs(_nodes({"T4": (1, 2)}))
    dist = WorkloadDistribution.from_counts({(1000, 1000, 1, 0, ("G2",)): 1.0, (1000, 500, 1, 0, ()): 1.0})
    state = np.array([[300, 1000]], dtype=np.int32)  # 1,300 milli free; GPU0's 300 is too small for 500
    args = (state, np.array([64_000]), np.array([0]), np.array([0]))
    fgd = FragModel.build(dist, t).amount(*args)
    neutral = FragModel.build(dist, t, model_access="neutral").amount(*args)
    # FGD: the G2-pinned shape cannot use the T4 node, so all 1,300 free milli are its fragment
    assert fgd[0] == pytest.approx(0.5 * 1300 + 0.5 * 300)
    assert neutral[0] == pytest.approx(0.5 * 300)


def test_pin_pressure_claims_the_share_of_a_models_free_gpus_that_its_pinned_demand_needs() -> None:
    t = NodeTable.from_specs(_nodes({"G2": (3, 8), "T4": (4, 2)}))  # 24 + 8 GPUs
    pins = PinPressure(t)
    assert not pins.active and not pins.claims(t).any()
    pins.observe(PodRequest("cpu-only", 1000, 1024))
    for i in range(3):
        pins.observe(PodRequest(f"any{i}", 1000, 1024, 1, 1000))
    pins.observe(PodRequest("t4", 1000, 1024, 1, 1000, ("T4",)))  # a quarter of GPU demand is pinned to T4
    claims = dict(zip(t.models, pins.claims(t), strict=True))
    # 32 GPUs free, a quarter of future demand is T4's: 8 GPUs, all of T4's 8 free GPUs
    assert claims == {"G2": 0.0, "T4": pytest.approx(1.0)}
    t.allocate(0, PodRequest("x", 1000, 1024, 8, 1000), tuple(range(8)))  # 24 free: T4 needs 6 of its 8
    assert pins.claims(t)[t.models.index("T4")] == pytest.approx(0.75)


def test_a_pod_allowed_on_two_models_is_spread_over_them_by_capacity() -> None:
    t = NodeTable.from_specs(_nodes({"G2": (3, 8), "T4": (4, 2)}))
    pins = PinPressure(t)
    pins.observe(PodRequest("two", 1000, 1024, 1, 1000, ("G2", "T4")))
    assert pins.pinned.tolist() == pytest.approx([750.0, 250.0])
    pins.observe(PodRequest("gone", 1000, 1024, 1, 1000, ("H100",)))  # a model the cluster lacks: no claim
    assert pins.pinned.sum() == pytest.approx(1000.0) and pins.arrived == 2000.0


@settings(max_examples=40, deadline=None)
@given(
    pods=st.lists(
        st.tuples(st.integers(1, 8), st.sampled_from([(), ("G2",), ("T4",), ("G2", "T4"), ("H100",)])),
        min_size=1,
        max_size=30,
    ),
    used=st.integers(0, 3),
)
def test_claims_are_shares_between_0_and_1(pods: list[tuple[int, tuple[str, ...]]], used: int) -> None:
    t = NodeTable.from_specs(_nodes({"G2": (3, 8), "T4": (4, 2)}))
    for i in range(used):
        t.allocate(i, PodRequest(f"x{i}", 1000, 1024, 8, 1000), tuple(range(8)))
    pins = PinPressure(t)
    for i, (n, models) in enumerate(pods):
        pins.observe(PodRequest(f"p{i}", 1000, 1024, n, 1000, models))
    c = pins.claims(t)
    assert ((c >= 0) & (c <= 1)).all()
    if used == 3:  # G2 is full: once anything is pinned, G2 has nothing left to give a flexible pod
        assert c[t.models.index("G2")] == (1.0 if pins.active else 0.0)


def _place_all(policy: GpufleetPolicy, table: NodeTable, pods: list[PodRequest]) -> list[int]:
    s = Scheduler(table, policy, np.random.default_rng(0))
    out = []
    for p in pods:
        r = s.place(p)
        out.append(r.node if isinstance(r, Placement) else -1)
    return out


def test_a_flexible_pod_leaves_the_model_that_pinned_pods_will_need() -> None:
    # T4 nodes come first in node order, so without pin pressure a flexible pod lands there
    specs = _nodes({"T4": (2, 2), "G2": (2, 8)})
    pinned = [PodRequest(f"t4-{i}", 4000, 8192, 1, 1000, ("T4",)) for i in range(2)]
    flexible = [PodRequest(f"any-{i}", 4000, 8192, 1, 1000) for i in range(4)]
    pods = [*pinned, *flexible]
    t_on, t_off = NodeTable.from_specs(specs), NodeTable.from_specs(specs)
    on = _place_all(GpufleetPolicy(t_on), t_on, pods)
    off = _place_all(GpufleetPolicy(t_off, pin_pressure=False), t_off, pods)
    t4 = {i for i, s in enumerate(specs) if s.gpu_model == "T4"}
    assert all(n in t4 for n in on[:2]) and all(n in t4 for n in off[:2])
    assert not any(n in t4 for n in on[2:])  # a third of demand is T4's: its 2 free GPUs are claimed
    assert any(n in t4 for n in off[2:])


@settings(max_examples=25, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(st.sampled_from([2000, 8000, 32000]), st.sampled_from([300, 500, 1000]), st.integers(1, 4)),
        min_size=3,
        max_size=25,
    )
)
def test_with_nothing_pinned_pin_pressure_changes_no_placement(shapes: list[tuple[int, int, int]]) -> None:
    specs = _nodes({"T4": (3, 2), "G2": (3, 8), "V100": (2, 4)})
    pods = [PodRequest(f"p{i}", c, 4096, n, g if n == 1 else 1000) for i, (c, g, n) in enumerate(shapes)]
    t_on, t_off = NodeTable.from_specs(specs), NodeTable.from_specs(specs)
    assert _place_all(GpufleetPolicy(t_on), t_on, pods) == _place_all(
        GpufleetPolicy(t_off, pin_pressure=False), t_off, pods
    )


def _openb_like() -> tuple[list[NodeSpec], list[PodRequest]]:
    nodes = _nodes({"G2": (20, 8), "T4": (20, 2)}) + _nodes({"A10": (1, 1)}, cpu=8_000, mem=16_384)
    pods = [PodRequest(f"p{i:04d}", 4000 if i % 3 else 20_000, 8192, 1 + (i % 5 == 0), 1000) for i in range(2000)]
    pods += [PodRequest(f"c{i:03d}", 1000, 1024) for i in range(100)]  # CPU-only: never pinned
    return nodes, pods


@pytest.mark.parametrize("spread", ["capacity", "uniform", "family"])
def test_derived_lists_pin_the_share_asked_and_only_to_models_that_can_hold_the_pod(spread: str) -> None:
    nodes, pods = _openb_like()
    out = pin_models(pods, nodes, PinVariant("x", 0.3, spread, seed=7))
    assert [p.name for p in out] == [p.name for p in pods]
    pinned = [p for p in out if p.gpu_models]
    assert 0.26 < len(pinned) / 2000 < 0.34
    assert all(not p.gpu_models for p in out if p.num_gpu == 0)
    for p in pinned:  # 20-core pods and 2-GPU pods never go to the 8-core single-GPU A10 node
        assert "A10" not in p.gpu_models or (p.cpu_milli <= 8000 and p.num_gpu == 1)
    counts = {m: sum(m in p.gpu_models for p in pinned) for m in ("G2", "T4", "A10")}
    if spread == "capacity":
        assert counts["G2"] > 2.5 * counts["T4"] and counts["A10"] < 10  # 160 vs 40 vs 1 GPUs
    if spread == "uniform":
        assert counts["A10"] > 100  # every eligible model equally likely
    if spread == "family":
        assert all(p.gpu_models in {("G2",), ("T4",), ("A10",)} for p in pinned)  # no pair in this fleet


def test_the_same_pods_are_pinned_whatever_the_spread_and_bad_variants_are_refused() -> None:
    nodes, pods = _openb_like()
    a = pin_models(pods, nodes, PinVariant("x", 0.2, "capacity", seed=3))
    b = pin_models(pods, nodes, PinVariant("x", 0.2, "uniform", seed=3))
    assert [bool(p.gpu_models) for p in a] == [bool(p.gpu_models) for p in b]
    assert PinVariant("default", 0.2, "uniform").name == "default+pin20-uniform"
    with pytest.raises(ValidationError, match="share"):
        pin_models(pods, nodes, PinVariant("x", 1.5, "capacity"))
    with pytest.raises(ValidationError, match="spread"):
        pin_models(pods, nodes, PinVariant("x", 0.5, "round-robin"))


def test_pin_pressure_never_changes_a_choice_among_nodes_of_one_model() -> None:
    """The simulator's class schedulers hold one GPU model; pinned requests there must place as without pins."""
    specs = _nodes({"H100": (6, 8)})
    pods = [PodRequest(f"p{i}", 4000, 8192, 1 + i % 3, 1000, ("H100",) if i % 2 else ()) for i in range(30)]
    t_on, t_off = NodeTable.from_specs(specs), NodeTable.from_specs(specs)
    assert _place_all(GpufleetPolicy(t_on), t_on, pods) == _place_all(
        GpufleetPolicy(t_off, pin_pressure=False), t_off, pods
    )
