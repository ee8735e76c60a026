"""The scheduler's one call: ``place(request) -> Placement | Infeasible`` over a node table.

The scheduler filters (model, GPU count/share, CPU, memory), asks its policy to choose among the nodes
that fit, and commits the allocation to the table. It never places a pod over capacity; a pod that
fits nowhere is returned as :class:`Infeasible` with a reason code (and the table is untouched).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.frag import FragModel, WorkloadDistribution
from gpufleet.schedule.fragpolicy import FgdPolicy, GpufleetPolicy
from gpufleet.schedule.policies import BASELINES, Policy
from gpufleet.schedule.table import NodeTable, PodRequest

POLICY_NAMES: tuple[str, ...] = ("random", "dotprod", "bestfit", "packing", "clustering", "fgd", "gpufleet")


@dataclass(frozen=True, slots=True)
class Placement:
    """``request`` was placed on ``node`` (row index; ``node_name`` for people) using ``gpu_slots``."""

    request: PodRequest
    node: int
    node_name: str
    gpu_slots: tuple[int, ...]
    reason: str = "placed"


@dataclass(frozen=True, slots=True)
class Infeasible:
    """``request`` fits on no node now. ``reason`` is a code such as ``insufficient_gpu``."""

    request: PodRequest
    reason: str


# A placement's second opinion (``Scheduler.place``): given the index of the ``prefer`` mask the candidates came from
# (-1: none), the candidate nodes and the policy's (node, GPU slots), another (node, slots, reason) among the
# candidates, or None to keep the policy's.
Redirect = Callable[[int, npt.NDArray[np.intp], int, tuple[int, ...]], tuple[int, tuple[int, ...], str] | None]


def make_policy(name: str, table: NodeTable, target: WorkloadDistribution | None = None) -> Policy:
    """Build a policy by name. ``fgd`` needs ``target`` (the workload distribution it optimises for)."""
    if name in BASELINES:
        return BASELINES[name]()
    if name == "fgd":
        if target is None:
            raise ValidationError("policy", "fgd needs a target workload distribution")
        return FgdPolicy(table, FragModel.build(target, table))
    if name == "gpufleet":
        return GpufleetPolicy(table)
    raise ValidationError("policy", f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")


class Scheduler:
    """Places pods one at a time on ``table`` with ``policy``; ``rng`` breaks ties (seeded by the caller)."""

    def __init__(self, table: NodeTable, policy: Policy, rng: np.random.Generator) -> None:
        self.table = table
        self.policy = policy
        self.rng = rng

    def place(
        self, request: PodRequest, prefer: Sequence[npt.NDArray[np.bool_]] = (), redirect: Redirect | None = None
    ) -> Placement | Infeasible:
        """Filter, score, commit. Returns what was decided; never raises for a pod that does not fit.

        ``prefer``: node masks in order of preference (capacity tiers, say): the policy chooses among the nodes
        that fit in the first mask that has any; nodes in no mask come last. ``redirect``: asked with the policy's
        choice before it is committed (:data:`Redirect`); what it returns, if anything, is committed instead."""
        request.validate()
        self.policy.observe(request)
        fits = self.table.feasible(request)
        candidates = np.flatnonzero(fits)
        if candidates.size == 0:
            return Infeasible(request, self.table.infeasible_reason(request))
        mask_index = -1
        for i, mask in enumerate(prefer):
            preferred = np.flatnonzero(fits & mask)
            if preferred.size:
                candidates, mask_index = preferred, i
                break
        node, gpus = self.policy.choose(self.table, request, candidates, self.rng)
        reason = "placed"
        if redirect is not None and (other := redirect(mask_index, candidates, node, gpus)) is not None:
            node, gpus, reason = other
        self.table.allocate(node, request, gpus)
        return Placement(request, node, self.table.names[node], gpus, reason)

    def release(self, placement: Placement) -> None:
        """Free what ``placement`` took (a pod finished, was preempted or moved)."""
        self.table.release(placement.node, placement.request, placement.gpu_slots)
