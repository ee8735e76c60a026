"""Scheduling over node *state classes*: the same policies, scored once per distinct node state.

In a fleet of whole-GPU nodes of one GPU model whose pods take CPU and memory in proportion to their GPUs,
a node's whole scheduling state is its number of free GPUs. Every policy in :data:`POLICY_NAMES` except
``random`` and ``clustering`` scores a node from its state alone (the same fact the fragmentation policies'
``state_hash`` dedup uses), so nodes with equal free GPUs score equally and the decision reduces to choosing
a *class* (a free-GPU count) among the classes that hold a fitting node. :class:`ClassScheduler` keeps one
prototype :class:`NodeTable` row per class, asks the policy to choose among the candidate rows (numpy scoring
over the prototype table) and memoises the answer per (request, candidate classes, policy model). The caller
then takes a node of the chosen class (its tie order). ``random`` is supported (uniform over classes, not
nodes); ``clustering`` is not (its score reads per-node pod tags); ``fgd`` only with a ``target`` distribution.

Contract: :meth:`ClassScheduler.choose` returns a class from ``candidates`` (which the caller guarantees fit)
with a reason code; it never mutates anything but its caches and the policy's learned distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.frag import WorkloadDistribution
from gpufleet.schedule.policies import Policy
from gpufleet.schedule.scheduler import POLICY_NAMES, make_policy
from gpufleet.schedule.table import MILLI, NodeSpec, NodeTable, PodRequest

# fgd needs the workload distribution in advance (pass ``target``); the simulator offers the others
CLASS_POLICIES: tuple[str, ...] = tuple(p for p in POLICY_NAMES if p not in ("clustering", "fgd"))
CPU_PER_GPU_MILLI = 12_000  # what a whole-GPU pod takes per GPU (a typical 8-GPU node: 96 vCPU, 1 TiB)
MEM_PER_GPU_MIB = 128 * 1024


def whole_gpu_request(name: str, gpus: int, model: str) -> PodRequest:
    """A pod taking ``gpus`` whole GPUs of ``model`` and CPU/memory in proportion."""
    return PodRequest(name, gpus * CPU_PER_GPU_MILLI, gpus * MEM_PER_GPU_MIB, gpus, MILLI, (model,))


@dataclass(frozen=True, slots=True)
class ClassChoice:
    """The chosen free-GPU class and why (``policy_<name>``, or ``only_class`` when there was no choice)."""

    free_gpus: int
    reason: str


class ClassScheduler:
    """One GPU model's state classes ``0..gpus_per_node`` free GPUs, scored by a named policy."""

    def __init__(
        self,
        policy: str,
        model: str,
        gpus_per_node: int,
        rng: np.random.Generator,
        target: WorkloadDistribution | None = None,
    ) -> None:
        if policy not in CLASS_POLICIES and not (policy == "fgd" and target is not None):
            raise ValidationError(
                "scheduler_policy", f"{policy!r} is not a state-class policy; choose one of {', '.join(CLASS_POLICIES)}"
            )
        self.policy_name = policy
        self.model = model
        self.per = gpus_per_node
        self.rng = rng
        specs = [
            NodeSpec(
                f"{model}-free{k}",
                gpus_per_node * CPU_PER_GPU_MILLI,
                gpus_per_node * MEM_PER_GPU_MIB,
                gpus_per_node,
                model,
            )
            for k in range(gpus_per_node + 1)
        ]
        self.table = NodeTable.from_specs(specs)
        for k in range(gpus_per_node):  # row k keeps k GPUs free
            used = whole_gpu_request(f"fill{k}", gpus_per_node - k, model)
            self.table.allocate(k, used, tuple(range(gpus_per_node - k)))
        self.policy: Policy = make_policy(policy, self.table, target)
        if hasattr(self.policy, "rank"):  # ties go to the fewest free GPUs (best fit), deterministically
            self.policy.rank = np.arange(gpus_per_node + 1, dtype=np.int64)
        self._memo: dict[tuple[int, tuple[int, ...], int], ClassChoice] = {}
        self._bits_memo: dict[int, ClassChoice] = {}  # (bits << 8 | gpus) -> choice, for ``_bits_epoch``
        self._bits_epoch = -1
        self._reason = f"policy_{policy}"
        # the policy, if it versions its model (the policy object never changes): what choose_bits reads
        self._versioned: Any = self.policy if hasattr(self.policy, "model_epoch") else None
        self._requests: dict[int, PodRequest] = {}

    def request(self, gpus: int) -> PodRequest:
        r = self._requests.get(gpus)
        if r is None:
            r = self._requests[gpus] = whole_gpu_request(f"{self.model}x{gpus}", gpus, self.model)
        return r

    def observe(self, gpus: int) -> None:
        """Tell the policy about one arriving pod (online learning); once per pod, not per attempt."""
        self.policy.observe(self.request(gpus))

    def _epoch(self) -> int:
        return int(getattr(self.policy, "model_epoch", 0))

    def choose(self, gpus: int, candidates: tuple[int, ...]) -> ClassChoice:
        """The free-GPU class (one of ``candidates``, each ``>= gpus``) a pod of ``gpus`` GPUs goes to."""
        if len(candidates) == 1:
            return ClassChoice(candidates[0], "only_class")
        key = (gpus, candidates, self._epoch())
        got = self._memo.get(key)
        if got is None:
            rows = np.asarray(candidates, dtype=np.int64)
            row, _slots = self.policy.choose(self.table, self.request(gpus), rows, self.rng)
            got = ClassChoice(int(row), self._reason)
            if self.policy_name != "random":  # random draws anew every time
                self._memo[key] = got
        return got

    def choose_bits(self, gpus: int, bits: int) -> ClassChoice:
        """:meth:`choose` with the candidate classes as a bit set (bit ``k``: class ``k``; only bits ``>= gpus``
        set, at least one). The same answer, memoised on the bits (the hot path of the simulator)."""
        versioned = self._versioned
        epoch = 0 if versioned is None else versioned.model_epoch  # as _epoch()
        if epoch != self._bits_epoch:
            self._bits_memo.clear()
            self._bits_epoch = epoch
        key = bits << 8 | gpus
        got = self._bits_memo.get(key)
        if got is None:
            cands = tuple([k for k in range(gpus, self.per + 1) if bits >> k & 1])
            got = self.choose(gpus, cands)
            if self.policy_name != "random":  # random draws anew every time
                self._bits_memo[key] = got
        return got
