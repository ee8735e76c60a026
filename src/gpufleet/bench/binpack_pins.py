"""Pod lists with GPU-model constraints, derived from an openb pod list by our own code.

None of the public openb pod lists in ``../shared/data`` names a GPU model (``gpu_spec`` is empty in all
six), so they cannot show how a packer treats pods pinned to a model. The FGD paper's constrained lists are
not here; these variants stand in for them. A share of the GPU pods (chosen with a seeded generator) is
pinned, each pod to models whose nodes could hold it on an empty node (GPU count, CPU, memory):

- ``capacity``: one model, drawn in proportion to the GPUs of that model that could hold the pod: pinned
  demand follows the fleet's shape, so no model is over-asked on average;
- ``uniform``: one model, each eligible model equally likely: the small models (2 A10 nodes, 19 single-V100
  nodes) are asked for far more than they hold, as when every team wants the same scarce type;
- ``family``: like ``capacity``, but a pod drawn to a V100 or to a G2/G3 model may run on either member of
  the pair (``V100M16|V100M32``, ``G2|G3``, the members the fleet has): constraints naming several models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import NodeSpec, PodRequest

SPREADS = ("capacity", "uniform", "family")
FAMILIES = (("V100M16", "V100M32"), ("G2", "G3"))


@dataclass(frozen=True, slots=True)
class PinVariant:
    """``share`` of GPU pods pinned, spread as ``spread`` (see the module docstring), generator ``seed``."""

    base: str  # the openb pod list's variant name, e.g. "default", "gpushare40"
    share: float
    spread: str
    seed: int = 0

    @property
    def suffix(self) -> str:
        return f"+pin{round(100 * self.share)}{'' if self.spread == 'capacity' else '-' + self.spread}"

    @property
    def name(self) -> str:
        return self.base + self.suffix

    def validate(self) -> None:
        if not 0.0 < self.share <= 1.0:
            raise ValidationError("share", f"must be in (0, 1], got {self.share}")
        if self.spread not in SPREADS:
            raise ValidationError("spread", f"unknown spread {self.spread!r}; choose one of {', '.join(SPREADS)}")


# the derived lists `gpufleet bench generalize` packs beside the public ones (fixed before their first run)
GENERALIZE_VARIANTS = (
    PinVariant("default", 0.10, "capacity", seed=1),
    PinVariant("default", 0.33, "capacity", seed=2),
    PinVariant("default", 0.20, "uniform", seed=3),
    PinVariant("default", 0.33, "family", seed=4),
    PinVariant("gpushare40", 0.25, "capacity", seed=5),
    PinVariant("gpushare100", 0.33, "uniform", seed=6),
)


def pin_models(pods: Sequence[PodRequest], nodes: Sequence[NodeSpec], variant: PinVariant) -> list[PodRequest]:
    """``pods`` with ``variant.share`` of the GPU pods pinned to GPU models; every other pod unchanged."""
    variant.validate()
    models = sorted({n.gpu_model for n in nodes if n.gpu_count > 0 and n.gpu_model})
    if not models:
        raise ValidationError("gpu_model", "no GPU node names its model")
    gpus = np.array([n.gpu_count for n in nodes], dtype=np.int64)
    cpu = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
    mem = np.array([n.memory_mib for n in nodes], dtype=np.int64)
    model_of = np.array([models.index(n.gpu_model) if n.gpu_model in models else -1 for n in nodes])
    pick = np.random.default_rng([variant.seed, 0])  # which pods: the same pods whatever the spread
    draw_model = np.random.default_rng([variant.seed, 1])
    out: list[PodRequest] = []
    for pod in pods:
        if pick.random() >= variant.share or pod.num_gpu == 0:
            out.append(pod)
            continue
        holds = (gpus >= pod.num_gpu) & (cpu >= pod.cpu_milli) & (mem >= pod.memory_mib) & (model_of >= 0)
        weight = np.bincount(model_of[holds], weights=gpus[holds], minlength=len(models)).astype(np.float64)
        if weight.sum() <= 0:
            out.append(pod)  # no node could ever hold it: leave it as it is
            continue
        if variant.spread == "uniform":
            weight = (weight > 0).astype(np.float64)
        model = models[int(draw_model.choice(len(models), p=weight / weight.sum()))]
        allowed: tuple[str, ...] = (model,)
        if variant.spread == "family":
            allowed = next((tuple(m for m in sorted(f) if m in models) for f in FAMILIES if model in f), allowed)
        out.append(replace(pod, gpu_models=allowed))
    return out
