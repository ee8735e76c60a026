"""Priority preemption with checkpoints: free GPUs for a higher-priority request, wasting the least work.

Rules (each one is a reason code when it excludes a candidate victim):
- only strictly lower priority is preempted (``not_lower_priority``);
- serving is never preempted for training (``serving_protected``);
- a job younger than its minimum runtime is protected (``min_runtime``);
- victims must sit on one node that can then host the request (GPUs are node-local).
The cost of evicting a victim is the GPU-hours it loses: a checkpointable job is told to checkpoint within
a SIGTERM-style grace period and loses the grace period (never more than the work since its last
checkpoint); a job that cannot checkpoint loses everything since its last checkpoint (or its start);
both pay their restart time. The plan picks the node whose cheapest sufficient victim set loses least.

A gang (a pod of several whole nodes) needs whole nodes: :func:`plan_gang_preemption` empties the nodes whose
every pod may be evicted, cheapest nodes first, as many as the free whole nodes leave it short of.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gpufleet.domain.workloads import WorkloadKind


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job (or one replica) holding ``gpus`` whole GPUs on ``node``."""

    id: str
    kind: WorkloadKind
    priority: int
    node: int
    gpus: int
    started_s: int
    last_checkpoint_s: int | None = None
    checkpointable: bool = False
    min_runtime_s: int = 0
    restart_s: int = 0


@dataclass(frozen=True, slots=True)
class PreemptRequest:
    id: str
    kind: WorkloadKind
    priority: int
    gpus: int


@dataclass(frozen=True, slots=True)
class Eviction:
    job_id: str
    action: Literal["checkpoint_then_stop", "stop"]
    grace_s: int
    lost_gpu_h: float


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    request_id: str
    node: int
    evictions: tuple[Eviction, ...]
    lost_gpu_h: float
    reason: str = "preempt_lowest_loss"


@dataclass(frozen=True, slots=True)
class NoPreemption:
    request_id: str
    reason: str  # "fits_without_preemption" | "no_eligible_victims" | "victims_insufficient"
    excluded: tuple[tuple[str, str], ...] = ()  # (job id, reason code)


def eviction_cost(job: RunningJob, now_s: int, grace_s: int) -> Eviction:
    """What evicting ``job`` now loses, in GPU-hours, and how it is told to stop."""
    lost = eviction_loss_gpu_h(job, now_s, grace_s)
    if job.checkpointable:
        return Eviction(job.id, "checkpoint_then_stop", grace_s, lost)
    return Eviction(job.id, "stop", 0, lost)


def eviction_loss_gpu_h(job: RunningJob, now_s: int, grace_s: int) -> float:
    """The GPU-hours evicting ``job`` now loses (:func:`eviction_cost`'s figure, without building the eviction)."""
    since_ckpt_s = max(0, now_s - (job.last_checkpoint_s if job.last_checkpoint_s is not None else job.started_s))
    lost_s = min(grace_s, since_ckpt_s) if job.checkpointable else since_ckpt_s
    return job.gpus * (lost_s + job.restart_s) / 3600


def exclusion(job: RunningJob, req: PreemptRequest, now_s: int) -> str | None:
    """Why ``job`` may not be evicted for ``req`` (a reason code), or None if it may."""
    if job.priority >= req.priority:
        return "not_lower_priority"
    if job.kind is WorkloadKind.SERVING and req.kind is WorkloadKind.TRAINING:
        return "serving_protected"
    if now_s - job.started_s < job.min_runtime_s:
        return "min_runtime"
    return None


def plan_preemption(
    req: PreemptRequest,
    running: Sequence[RunningJob],
    free_gpus_by_node: dict[int, int],
    now_s: int,
    grace_s: int = 120,
) -> PreemptionPlan | NoPreemption:
    """Choose victims on one node so that ``req.gpus`` whole GPUs become free, losing the fewest GPU-hours.

    ``free_gpus_by_node`` is the idle whole GPUs per node now. Within a node, victims are taken cheapest
    GPU-hour-per-GPU first, then the set is pruned of victims not needed (largest loss dropped first). A request for
    no GPUs needs no preemption (``fits_without_preemption``)."""
    if req.gpus <= 0 or any(free >= req.gpus for free in free_gpus_by_node.values()):
        return NoPreemption(req.id, "fits_without_preemption")
    excluded: list[tuple[str, str]] = []
    by_node: dict[int, list[tuple[float, RunningJob]]] = {}  # node -> (GPU-hours its eviction loses, job)
    for job in running:
        why = exclusion(job, req, now_s)
        if why is not None:
            excluded.append((job.id, why))
            continue
        by_node.setdefault(job.node, []).append((eviction_loss_gpu_h(job, now_s, grace_s), job))
    if not by_node:
        return NoPreemption(req.id, "no_eligible_victims", tuple(excluded))
    best: tuple[int, list[tuple[float, RunningJob]], float] | None = None  # (node, victims, GPU-hours lost)
    for node, cands in by_node.items():
        need = req.gpus - free_gpus_by_node.get(node, 0)
        if sum(j.gpus for _, j in cands) < need:
            continue
        cands.sort(key=lambda c: (c[0] / max(1, c[1].gpus), c[1].id))
        chosen: list[tuple[float, RunningJob]] = []
        got = 0
        for c in cands:
            if got >= need:
                break
            chosen.append(c)
            got += c[1].gpus
        for c in sorted(chosen, key=lambda c: -c[0]):  # drop victims that are not needed
            if got - c[1].gpus >= need:
                chosen.remove(c)
                got -= c[1].gpus
        lost = sum(c[0] for c in chosen)
        if best is None or lost < best[2]:
            best = (node, chosen, lost)
    if best is None:
        return NoPreemption(req.id, "victims_insufficient", tuple(excluded))
    node, chosen, lost = best
    return PreemptionPlan(req.id, node, tuple(eviction_cost(j, now_s, grace_s) for _, j in chosen), lost)


@dataclass(frozen=True, slots=True)
class GangPreemptionPlan:
    """Empty ``nodes`` (every pod on them evicted) so that a gang finds enough whole free nodes."""

    request_id: str
    nodes: tuple[int, ...]
    evictions: tuple[Eviction, ...]
    lost_gpu_h: float
    reason: str = "gang_lowest_loss"


def plan_gang_preemption(
    req: PreemptRequest,
    short_nodes: int,
    pods_by_node: Mapping[int, Sequence[RunningJob]],
    now_s: int,
    grace_s: int = 120,
) -> GangPreemptionPlan | NoPreemption:
    """Choose ``short_nodes`` busy nodes to empty for a gang, losing the fewest GPU-hours.

    ``pods_by_node``: busy nodes the gang may run on, each with *every* pod running on it (a node is emptied
    whole or not at all). A node qualifies only if each of its pods may be evicted (:func:`exclusion`: strictly
    lower priority, no serving for training, past its minimum runtime); among those, the nodes whose pods lose
    the fewest GPU-hours are emptied (ties: the lower node id). Reason codes: ``gang_lowest_loss``,
    ``fits_without_preemption`` (``short_nodes`` <= 0), ``no_eligible_victims``, ``victims_insufficient``.
    """
    if short_nodes <= 0:
        return NoPreemption(req.id, "fits_without_preemption")
    excluded: list[tuple[str, str]] = []
    nodes: list[tuple[float, int, tuple[RunningJob, ...]]] = []
    for node, jobs in pods_by_node.items():
        if not jobs:
            continue  # a free node is not the planner's: the world counts it in ``short_nodes``
        whys = [(j.id, exclusion(j, req, now_s)) for j in jobs]
        bad = [(i, w) for i, w in whys if w is not None]
        if bad:
            excluded.extend(bad)
            continue
        nodes.append((sum(eviction_loss_gpu_h(j, now_s, grace_s) for j in jobs), node, tuple(jobs)))
    if not nodes:
        return NoPreemption(req.id, "no_eligible_victims", tuple(excluded))
    if len(nodes) < short_nodes:
        return NoPreemption(req.id, "victims_insufficient", tuple(excluded))
    nodes.sort(key=lambda c: (c[0], c[1]))
    chosen = nodes[:short_nodes]
    return GangPreemptionPlan(
        req.id,
        tuple(n for _, n, _ in chosen),
        tuple(eviction_cost(j, now_s, grace_s) for _, _, jobs in chosen for j in jobs),
        sum(c[0] for c in chosen),
    )
