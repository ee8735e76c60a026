"""Derived pod lists with another workload mix (more multi-GPU pods, more CPU-only pods)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.bench.binpack import read_openb_pods
from gpufleet.bench.binpack_mix import GENERALIZE_MIXES, MixVariant, applies, mix_pods, replace_probability
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import PodRequest


def _shape(p: PodRequest) -> tuple[int, int, int, int, tuple[str, ...]]:
    return (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_models)


def _list(single: int = 3000, multi: int = 30, cpu: int = 400) -> list[PodRequest]:
    pods = [PodRequest(f"s{i}", 4000, 8192, 1, (250, 500, 1000)[i % 3]) for i in range(single)]
    pods += [PodRequest(f"m{i}", 32000, 65536, (2, 4, 8)[i % 3], 1000) for i in range(multi)]
    pods += [PodRequest(f"c{i}", 2000 + i % 5 * 1000, 4096) for i in range(cpu)]
    return pods


def _multi_share(pods: list[PodRequest]) -> float:
    gpus = [p.num_gpu * p.gpu_milli / 1000 for p in pods]
    return sum(g for p, g in zip(pods, gpus, strict=True) if p.num_gpu > 1) / sum(gpus)


@pytest.mark.parametrize("level", [0.2, 0.5, 0.8])
def test_multigpu_mix_reaches_the_asked_share_of_gpus_with_the_lists_own_shapes(level: float) -> None:
    pods = _list()
    out = mix_pods(pods, MixVariant("x", "multigpu", level, seed=3))
    assert len(out) == len(pods) and len({p.name for p in out}) == len(out)
    assert _multi_share(out) == pytest.approx(level, abs=0.03)
    assert {_shape(p) for p in out} <= {_shape(p) for p in pods}  # only the list's own shapes
    # CPU-only and multi-GPU pods are kept as they were, in place
    kept = [(a, b) for a, b in zip(pods, out, strict=True) if a.num_gpu != 1]
    assert kept and all(a == b for a, b in kept)


def test_replace_probability_solves_the_expected_share() -> None:
    single = [PodRequest("s", 1000, 1024, 1, 500)] * 100  # 50 GPUs
    multi = [PodRequest("m", 1000, 1024, 4, 1000)] * 5  # 20 GPUs, mean 4
    p = replace_probability(single, multi, 0.6)
    expected_multi = 20 + p * 100 * 4
    assert expected_multi / (expected_multi + (1 - p) * 50) == pytest.approx(0.6)
    assert replace_probability(single, multi, 0.1) == 0.0  # already above: nothing replaced


def test_cpu_mix_adds_copies_of_cpu_only_pods_and_leaves_the_rest() -> None:
    pods = _list()
    out = mix_pods(pods, MixVariant("x", "cpu", 2.5, seed=1))
    assert out[: len(pods)] == pods
    added = out[len(pods) :]
    assert len(added) == 600 and all(p.num_gpu == 0 for p in added)
    assert {_shape(p) for p in added} <= {_shape(p) for p in pods if p.num_gpu == 0}
    assert len({p.name for p in out}) == len(out)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(1, 10), st.integers(0, 20), st.floats(0.01, 0.99), st.integers(0, 2**31 - 1))
def test_a_multigpu_mix_keeps_the_pod_count_and_every_shape_from_the_list(
    single: int, multi: int, cpu: int, level: float, seed: int
) -> None:
    pods = _list(single, multi, cpu)
    out = mix_pods(pods, MixVariant("x", "multigpu", level, seed))
    assert len(out) == len(pods)
    assert Counter(p.num_gpu == 0 for p in out) == Counter(p.num_gpu == 0 for p in pods)
    assert {_shape(p) for p in out} <= {_shape(p) for p in pods}
    assert out == mix_pods(pods, MixVariant("x", "multigpu", level, seed))  # seeded: the same list again


def test_bad_variants_and_lists_are_refused_naming_the_field() -> None:
    pods = _list()
    with pytest.raises(ValidationError, match="kind"):
        mix_pods(pods, MixVariant("x", "bigger", 2.0))
    with pytest.raises(ValidationError, match="level"):
        mix_pods(pods, MixVariant("x", "multigpu", 1.0))
    with pytest.raises(ValidationError, match="level"):
        mix_pods(pods, MixVariant("x", "cpu", 0.5))
    no_multi = [p for p in pods if p.num_gpu <= 1]
    assert not applies(no_multi, "multigpu") and applies(no_multi, "cpu")
    with pytest.raises(ValidationError, match="pods"):
        mix_pods(no_multi, MixVariant("x", "multigpu", 0.3))
    with pytest.raises(ValidationError, match="pods"):
        mix_pods([p for p in pods if p.num_gpu], MixVariant("x", "cpu", 2.0))


def test_the_generalize_mixes_are_named_after_their_base_and_level() -> None:
    names = [m.name for m in GENERALIZE_MIXES]
    assert names == [
        "default+multigpu20",
        "default+multigpu50",
        "gpushare40+multigpu30",
        "default+cpu2x",
        "gpushare60+cpu3x",
        "gpushare100+cpu2x",
    ]


def test_a_pod_lists_gpu_spec_is_read_as_a_set_of_model_names(tmp_path: Path) -> None:
    f = tmp_path / "openb_pod_list_x.csv"
    f.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\na,1000,1024,1,500, G2 | T4|G2||\nb,1000,1024,1,1000,\n"
    )
    a, b = read_openb_pods(f)
    assert a.gpu_models == ("G2", "T4") and b.gpu_models == ()
