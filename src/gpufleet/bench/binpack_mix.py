"""Pod lists with another workload mix, derived from an openb pod list by our own code.

The six public openb lists vary one thing, the share of GPU pods that share a GPU. Two other kinds of cluster
stress a packer differently, and no public list here has them:

- ``multigpu``: more of the GPUs asked for by pods that take several whole GPUs on one node (training jobs);
  ``level`` is the share of the list's requested GPUs held by multi-GPU pods (0.07 in ``default``). Each GPU pod
  that takes one GPU or less is replaced, independently with the probability that makes the expected share
  ``level``, by a copy (CPU, memory, GPU count) of a multi-GPU pod of the same list drawn at random.
- ``cpu``: more pods without GPUs, whose CPU and memory can strand a node's GPUs; ``level`` is how many times the
  list's CPU-only pods there are (copies of its CPU-only pods drawn at random are added).

The shapes are always the list's own; only their mix changes. The draw is seeded (``seed``). FGD's target
distribution is the rewritten list, as with the pinned lists (:mod:`gpufleet.bench.binpack_pins`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import PodRequest

KINDS = ("multigpu", "cpu")


@dataclass(frozen=True, slots=True)
class MixVariant:
    """The list ``base`` with its mix moved to ``level`` of kind ``kind`` (module docstring), generator ``seed``."""

    base: str  # the openb pod list's variant name, e.g. "default", "gpushare40"
    kind: str
    level: float
    seed: int = 0

    @property
    def suffix(self) -> str:
        if self.kind == "cpu":
            return f"+cpu{self.level:g}x"
        return f"+multigpu{round(100 * self.level)}"

    @property
    def name(self) -> str:
        return self.base + self.suffix

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ValidationError("kind", f"unknown mix {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.kind == "multigpu" and not 0.0 < self.level < 1.0:
            raise ValidationError("level", f"the multi-GPU share of GPUs must be in (0, 1), got {self.level}")
        if self.kind == "cpu" and not 1.0 <= self.level <= 100.0:
            raise ValidationError("level", f"CPU-only pods must be 1-100 times the list's, got {self.level}")


# the derived lists `gpufleet bench generalize` packs beside the public ones (fixed before their first run)
GENERALIZE_MIXES = (
    MixVariant("default", "multigpu", 0.2, seed=7),
    MixVariant("default", "multigpu", 0.5, seed=8),
    MixVariant("gpushare40", "multigpu", 0.3, seed=9),
    MixVariant("default", "cpu", 2.0, seed=10),
    MixVariant("gpushare60", "cpu", 3.0, seed=11),
    MixVariant("gpushare100", "cpu", 2.0, seed=12),
)


def _gpus(pod: PodRequest) -> float:
    return pod.num_gpu * pod.gpu_milli / 1000.0


def replace_probability(single: Sequence[PodRequest], multi: Sequence[PodRequest], level: float) -> float:
    """The probability with which each pod of ``single`` must become a copy of a random pod of ``multi`` for
    multi-GPU pods to hold ``level`` of the requested GPUs in expectation (0 when they already hold more)."""
    s = sum(_gpus(p) for p in single)
    m = sum(_gpus(p) for p in multi)
    mean_multi = m / len(multi)
    p = (level * s - (1.0 - level) * m) / ((1.0 - level) * len(single) * mean_multi + level * s)
    return float(min(1.0, max(0.0, p)))


def applies(pods: Sequence[PodRequest], kind: str) -> bool:
    """Whether ``pods`` has the pods a mix of ``kind`` copies (:func:`mix_pods` refuses the list otherwise)."""
    if kind == "multigpu":
        return any(p.num_gpu > 1 for p in pods) and any(p.num_gpu == 1 for p in pods)
    return any(p.num_gpu == 0 for p in pods)


def mix_pods(pods: Sequence[PodRequest], variant: MixVariant) -> list[PodRequest]:
    """``pods`` with the mix of ``variant`` (module docstring); pods not drawn are unchanged and keep their order."""
    variant.validate()
    rng = np.random.default_rng([variant.seed, 2])
    if variant.kind == "multigpu":
        if not applies(pods, "multigpu"):
            raise ValidationError(
                "pods", f"list {variant.base!r} needs pods with one GPU (or less) and pods with several GPUs"
            )
        multi = [p for p in pods if p.num_gpu > 1]
        prob = replace_probability([p for p in pods if p.num_gpu == 1], multi, variant.level)
        out: list[PodRequest] = []
        for pod in pods:
            if pod.num_gpu == 1 and rng.random() < prob:
                donor = multi[int(rng.integers(len(multi)))]
                out.append(replace(donor, name=f"{pod.name}-multigpu"))
            else:
                out.append(pod)
        return out
    if not applies(pods, "cpu"):
        raise ValidationError("pods", f"list {variant.base!r} has no pod without GPUs to copy")
    cpu_only = [p for p in pods if p.num_gpu == 0]
    extra = round((variant.level - 1.0) * len(cpu_only))
    picks = rng.integers(len(cpu_only), size=extra)
    return [*pods, *(replace(cpu_only[int(i)], name=f"{cpu_only[int(i)].name}-cpu{k}") for k, i in enumerate(picks))]
