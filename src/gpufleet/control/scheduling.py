"""The scheduling stage of the loop: where a pod runs, whether it may preempt, whether its team's quota admits it.

Observations in, decisions out, each with a reason code; the world (or an adapter) applies them and never
decides. The stage runs the schedule package:

- :class:`FleetScheduler` places a pod on the cluster state the world exposes (the free-GPU index over its
  nodes, see :mod:`gpufleet.schedule.bestfit`, and each node's rack). Capacity tiers are tried in the pod's
  fallback order (reserved, on demand, spot, secondary: the cheapest capacity first); inside a tier the
  scheduler policy named by the scenario chooses among the nodes that fit (:mod:`gpufleet.schedule.classes`).
  A pod bigger than a node is a gang of whole nodes, placed all or nothing, one rack preferred
  (:func:`gpufleet.schedule.gang.plan_whole_nodes`) inside each tier's share of the gang.
- :meth:`FleetScheduler.preempt` asks :func:`gpufleet.schedule.preemption.plan_preemption` (strictly lower
  priority only, serving never for training, checkpoint-aware cost) and takes the plan only when the victims
  lose fewer GPU-hours than the pod would idle waiting for a new node.
- :class:`QuotaAdmission` is the Kueue-style gate in front of placement (:class:`gpufleet.schedule.QuotaBook`):
  nominal quota, borrowing and lending in a cohort, lent quota reclaimed from borrowers. A pod holds its
  quota from admission until it stops running (ends, is interrupted or preempted); it is then re-admitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.domain.workloads import WorkloadKind
from gpufleet.schedule.bestfit import FreeGpuIndex
from gpufleet.schedule.classes import CLASS_POLICIES, ClassScheduler
from gpufleet.schedule.gang import plan_whole_nodes
from gpufleet.schedule.preemption import (
    NoPreemption,
    PreemptionPlan,
    PreemptRequest,
    RunningJob,
    eviction_cost,
    plan_preemption,
)
from gpufleet.schedule.quota import Admission, QuotaBook, Reclaim, TeamQuota

__all__ = [
    "CLASS_POLICIES",
    "Bind",
    "FleetScheduler",
    "FreeGpuIndex",
    "PodAsk",
    "QuotaAdmission",
    "Reclaim",
    "RunningJob",
    "TeamQuota",
    "Wait",
]


@dataclass(frozen=True, slots=True)
class PodAsk:
    """One pod asking to run: ``gpus`` of SKU index ``sku`` on nodes of ``per_node`` GPUs, on ``tiers`` (ranks,
    in fallback order)."""

    pod: int
    sku: int
    gpus: int
    per_node: int
    tiers: tuple[int, ...]
    priority: int
    serving: bool


@dataclass(frozen=True, slots=True)
class Bind:
    """Run the pod on ``nodes`` (one per worker; a single-node pod has one). ``level``: node, rack or cluster."""

    nodes: tuple[int, ...]
    reason: str
    level: str = "node"


@dataclass(frozen=True, slots=True)
class Wait:
    reason: str  # "no_fit" | "gang_no_fit"


class FleetScheduler:
    """Places pods on the world's nodes with a named policy; one :class:`ClassScheduler` per SKU."""

    def __init__(
        self,
        policy: str,
        sku_ids: Sequence[str],
        gpus_per_node: Sequence[int],
        rng: np.random.Generator,
        *,
        preemption: bool = True,
        grace_s: int = 120,
    ) -> None:
        self.policy = policy
        self.preemption = preemption
        self.grace_s = grace_s
        self.classes = [ClassScheduler(policy, s, g, rng) for s, g in zip(sku_ids, gpus_per_node, strict=True)]

    def observe(self, ask: PodAsk) -> None:
        """A pod arrived (once per pod): the policy learns the workload online."""
        if ask.gpus < ask.per_node:
            self.classes[ask.sku].observe(ask.gpus)

    def place(self, ask: PodAsk, index: FreeGpuIndex, rack_of: Sequence[int]) -> Bind | Wait:
        """Where ``ask`` runs now, or why it waits. Reads the index; changes nothing."""
        s, g, per = ask.sku, ask.gpus, ask.per_node
        if g <= per:
            for t in ask.tiers:
                cands = tuple(k for k in range(g, per + 1) if index.free_nodes(s, t, k))
                if cands:
                    choice = self.classes[s].choose(g, cands)
                    return Bind((index.first_with_free(s, t, choice.free_gpus),), choice.reason)
            return Wait("no_fit")
        need = g // per
        counts = [index.free_nodes(s, t, per) for t in ask.tiers]
        if sum(counts) < need:
            return Wait("gang_no_fit")
        nodes: list[int] = []
        for t, c in zip(ask.tiers, counts, strict=True):
            take = min(c, need - len(nodes))
            if take <= 0:
                continue
            by_rack: dict[int, list[int]] = {}
            for n in index.nodes_with_free(s, t, per):
                by_rack.setdefault(rack_of[n], []).append(n)
            got = plan_whole_nodes(by_rack, take)
            assert got is not None  # the tier holds at least ``take`` free nodes
            nodes.extend(got[0])
        racks = {rack_of[n] for n in nodes}
        level = "rack" if len(racks) == 1 else "cluster"
        return Bind(tuple(nodes), f"gang_{level}", level)

    def preempt(
        self,
        ask: PodAsk,
        running: Sequence[RunningJob],
        free_gpus_by_node: dict[int, int],
        now_s: int,
        wait_s: int,
    ) -> PreemptionPlan | NoPreemption:
        """A plan to free one node for ``ask`` by evicting lower-priority work, if that wastes fewer GPU-hours
        than waiting ``wait_s`` for new capacity would idle the pod's GPUs (else :class:`NoPreemption`)."""
        if not self.preemption:
            return NoPreemption(str(ask.pod), "preemption_disabled")
        if ask.gpus > ask.per_node:
            return NoPreemption(str(ask.pod), "gang_not_preempting")
        kind = WorkloadKind.SERVING if ask.serving else WorkloadKind.TRAINING
        req = PreemptRequest(str(ask.pod), kind, ask.priority, ask.gpus)
        plan = plan_preemption(req, running, free_gpus_by_node, now_s, self.grace_s)
        if isinstance(plan, NoPreemption):
            return plan
        if plan.lost_gpu_h > ask.gpus * wait_s / 3600:
            return NoPreemption(str(ask.pod), "waiting_is_cheaper")
        return plan


def victim_lost_s(job: RunningJob, now_s: int, grace_s: int) -> int:
    """Seconds of work an evicted job loses (the plan's own cost model, without the restart time)."""
    e = eviction_cost(job, now_s, grace_s)
    return max(0, round(e.lost_gpu_h * 3600 / max(1, job.gpus)) - job.restart_s)


class QuotaAdmission:
    """Team quotas per (team, SKU): admit, hold, release; reclaim lent quota from borrowers.

    Teams without a quota entry are not limited (reason ``no_quota``). ``held`` maps a pod to the
    (team, flavor, GPUs) it holds; the book's usage is always the sum of ``held``.
    """

    def __init__(self, quotas: Sequence[TeamQuota] = ()) -> None:
        self.book = QuotaBook()
        for q in quotas:
            self.book.add(q)
        self.held: dict[int, tuple[str, str, int]] = {}

    def has_quota(self, team: str, flavor: str) -> bool:
        return (team, flavor) in self.book.quotas

    def check(self, team: str, flavor: str, gpus: int) -> Admission:
        """The book's decision (nothing recorded)."""
        if not self.has_quota(team, flavor):
            return Admission(team, flavor, gpus, "admit", "no_quota")
        return self.book.check(team, flavor, gpus)

    def hold(self, pod: int, team: str, flavor: str, gpus: int) -> None:
        """Record ``pod``'s usage after an ``admit`` (a reclaim plan must already be applied)."""
        if pod in self.held or not self.has_quota(team, flavor):
            return
        a = self.book.admit(team, flavor, gpus)
        assert a.decision == "admit", f"hold without admission: {a}"
        self.held[pod] = (team, flavor, gpus)

    def release(self, pod: int) -> bool:
        """``pod`` stopped holding quota; True if it held some."""
        got = self.held.pop(pod, None)
        if got is None:
            return False
        self.book.release(*got)
        return True

    @staticmethod
    def reclaim_victims(reclaim: Reclaim, candidates: Sequence[RunningJob], now_s: int, grace_s: int) -> list[str]:
        """Running pods of the borrowing team to evict so that at least ``reclaim.gpus`` come back: the ones
        that lose the fewest GPU-hours per GPU first (checkpoint-aware), serving never before training."""
        ranked = sorted(
            candidates,
            key=lambda j: (j.kind is WorkloadKind.SERVING, eviction_cost(j, now_s, grace_s).lost_gpu_h / j.gpus, j.id),
        )
        out: list[str] = []
        got = 0
        for j in ranked:
            if got >= reclaim.gpus:
                break
            out.append(j.id)
            got += j.gpus
        return out if got >= reclaim.gpus else []
