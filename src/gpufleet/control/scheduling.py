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
  lose fewer GPU-hours than the pod would idle waiting for a new node. With ``gang_preemption``,
  :meth:`FleetScheduler.preempt_gang` does the same for a gang: it empties whole nodes of lower-priority work
  (:func:`gpufleet.schedule.preemption.plan_gang_preemption`) when that loses fewer GPU-hours than the gang's
  GPUs would idle waiting for a node start.
- :class:`QuotaAdmission` is the Kueue-style gate in front of placement (:class:`gpufleet.schedule.QuotaBook`):
  nominal quota, borrowing and lending in a cohort, lent quota reclaimed from borrowers. A pod holds its
  quota from admission until it stops running (ends, is interrupted or preempted); it is then re-admitted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from gpufleet.control.placement import ReplicaSpread
from gpufleet.domain.workloads import WorkloadKind
from gpufleet.schedule.bestfit import FreeGpuIndex
from gpufleet.schedule.classes import CLASS_POLICIES, ClassScheduler
from gpufleet.schedule.consolidation import RunningPod, plan_consolidation
from gpufleet.schedule.frag import WorkloadDistribution
from gpufleet.schedule.gang import plan_whole_nodes
from gpufleet.schedule.preemption import (
    Eviction,
    GangPreemptionPlan,
    NoPreemption,
    PreemptionPlan,
    PreemptRequest,
    RunningJob,
    eviction_cost,
    plan_gang_preemption,
    plan_preemption,
)
from gpufleet.schedule.quota import Admission, QuotaBook, Reclaim, TeamQuota
from gpufleet.schedule.scheduler import Infeasible, Placement, Scheduler, make_policy
from gpufleet.schedule.table import MILLI, NodeSpec, NodeTable, PodRequest

__all__ = [
    "CLASS_POLICIES",
    "Bind",
    "Drain",
    "Eviction",
    "FleetScheduler",
    "FreeGpuIndex",
    "GangPreemptionPlan",
    "Infeasible",
    "NodeView",
    "Placement",
    "PodAsk",
    "PodView",
    "QuotaAdmission",
    "Reclaim",
    "RunningJob",
    "TeamQuota",
    "Wait",
    "plan_drains",
]


class PodAsk(NamedTuple):
    """One pod asking to run: ``gpus`` of SKU index ``sku`` on nodes of ``per_node`` GPUs, on ``tiers`` (ranks,
    in fallback order). Immutable (a named tuple: the simulator builds one per pod, ~1.3 M a simulated year)."""

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
    reason: str  # "no_fit" | "gang_no_fit" | "gang_not_whole_nodes"


WAIT_NO_FIT = Wait("no_fit")  # decisions are immutable: the hot path returns shared instances
WAIT_GANG_NO_FIT = Wait("gang_no_fit")
WAIT_GANG_NOT_WHOLE = Wait("gang_not_whole_nodes")  # more GPUs than a node, but not a multiple of a node's


class FleetScheduler:
    """The scheduling stage's one entry point: places pods with a named policy (built by
    :func:`gpufleet.schedule.make_policy`), on one of two views of the cluster.

    - Whole-GPU fleets of uniform nodes per SKU (the simulator): :meth:`place` over the free-GPU index, one
      :class:`ClassScheduler` per SKU (the policy scores node state classes), gangs of whole nodes by rack.
    - A heterogeneous node table (CPU, memory, GPU models, fractional GPUs: ``gpufleet bench binpack`` and
      ``bench sched-throughput`` replay through it): :meth:`place_request` / :meth:`release_request` over
      ``table``, the same policy scoring every feasible node (:class:`gpufleet.schedule.Scheduler`).
    """

    def __init__(
        self,
        policy: str,
        sku_ids: Sequence[str],
        gpus_per_node: Sequence[int],
        rng: np.random.Generator,
        *,
        preemption: bool = True,
        grace_s: int = 120,
        table: NodeTable | None = None,
        target: WorkloadDistribution | None = None,
        tie_rank: npt.NDArray[np.int64] | None = None,
        breach_cost_usd: float = 0.0,
        gpu_usd_h: Sequence[float] = (),
        gang_preemption: bool = False,
        spread: ReplicaSpread | None = None,
    ) -> None:
        """``table``: the node table :meth:`place_request` places on (None: no table view); ``target``: the
        workload distribution ``fgd`` needs; ``tie_rank``: a node order for ties on the table (None: the policy's);
        ``breach_cost_usd``: what a serving request missed while a replica waits costs, and ``gpu_usd_h`` one GPU
        per SKU index (the preemption gate, :meth:`preempt`; 0 or no price: waiting counts idle GPUs only);
        ``gang_preemption``: gangs may preempt too (:meth:`preempt_gang`; needs ``preemption``); ``spread``: a
        serving replica prefers nodes holding fewer of its fleet's replicas (:meth:`place`'s ``crowd``; None: off)."""
        self.policy = policy
        self.spread = spread
        self.preemption = preemption
        self.gang_preemption = gang_preemption
        self.grace_s = grace_s
        self.breach_cost_usd = breach_cost_usd
        self.gpu_usd_h = tuple(gpu_usd_h)
        self.classes = [ClassScheduler(policy, s, g, rng) for s, g in zip(sku_ids, gpus_per_node, strict=True)]
        # per SKU: the policy's observe, and the classes' request of each size a single-node pod may ask (the
        # very objects ClassScheduler.request memoises)
        self._observe = [c.policy.observe for c in self.classes]
        self._requests = [[c.request(k) for k in range(c.per + 1)] for c in self.classes]
        self._binds: dict[tuple[int, str], Bind] = {}  # single-node decisions are immutable: shared instances
        self._table: Scheduler | None = None
        if table is not None:
            pol = make_policy(policy, table, target)
            if tie_rank is not None:
                pol.rank = tie_rank  # type: ignore[attr-defined]
            self._table = Scheduler(table, pol, rng)

    @classmethod
    def on_table(
        cls,
        policy: str,
        table: NodeTable,
        rng: np.random.Generator,
        *,
        target: WorkloadDistribution | None = None,
        tie_rank: npt.NDArray[np.int64] | None = None,
    ) -> FleetScheduler:
        """A scheduler for a node table only (no whole-GPU fleet view)."""
        return cls(policy, (), (), rng, table=table, target=target, tie_rank=tie_rank)

    @property
    def table(self) -> NodeTable:
        if self._table is None:
            raise ValueError("this scheduler has no node table (construct it with table=...)")
        return self._table.table

    def place_request(self, request: PodRequest) -> Placement | Infeasible:
        """Filter the table's nodes, score them with the policy, commit the best: the placement, or why nothing
        fits (the table unchanged)."""
        if self._table is None:
            raise ValueError("this scheduler has no node table (construct it with table=...)")
        return self._table.place(request)

    def release_request(self, placement: Placement) -> None:
        """Free what :meth:`place_request` took."""
        if self._table is None:
            raise ValueError("this scheduler has no node table (construct it with table=...)")
        self._table.release(placement)

    def observe(self, ask: PodAsk) -> None:
        """A pod arrived (once per pod): the policy learns the workload online."""
        g = ask.gpus
        if g < ask.per_node:  # ClassScheduler.observe(g), read off its requests (two calls less per arrival)
            self._observe[ask.sku](self._requests[ask.sku][g])

    def place(
        self,
        ask: PodAsk,
        index: FreeGpuIndex,
        rack_of: Sequence[int],
        crowd: Mapping[int, int] | None = None,
        replicas: int = 0,
    ) -> Bind | Wait:
        """Where ``ask`` runs now, or why it waits. Reads the index; changes nothing. A pod of more GPUs than a node
        is a gang of whole nodes: one that no whole number of nodes holds waits (``gang_not_whole_nodes``).

        ``crowd``: for a serving replica, node -> replicas of its fleet running there, and ``replicas`` the fleet's
        size; with ``spread`` set, the tier the policy takes stays the same, and inside it the first node under the
        spread's cap, over the classes in the policy's order, is taken (reason ``replica_spread`` when that is not
        the node the policy alone would take); if none is under the cap, the policy's node."""
        s, g, per = ask.sku, ask.gpus, ask.per_node
        if g <= per:
            fit = ((1 << (per + 1)) - 1) >> g << g  # the classes g..per
            masks = index.masks[s]
            for t in ask.tiers:
                bits = masks[t] & fit
                if bits:
                    choice = self.classes[s].choose_bits(g, bits)
                    if crowd and self.spread is not None and self.spread.applies(t):
                        spread_bind = self._spread(ask, index, t, bits, choice.free_gpus, crowd, replicas)
                        if spread_bind is not None:
                            return spread_bind
                    # the node longest in the chosen class (index.first_with_free, read off the view)
                    key = (next(iter(index.buckets[s][t][choice.free_gpus])), choice.reason)
                    got = self._binds.get(key)
                    if got is None:
                        got = self._binds[key] = Bind((key[0],), key[1])
                    return got
            return WAIT_NO_FIT
        if per <= 0 or g % per:  # a gang runs on whole nodes: no whole number of nodes holds it
            return WAIT_GANG_NOT_WHOLE
        need = g // per
        whole = index.buckets[s]  # index.free_nodes(s, t, per) is len(whole[t][per])
        counts = [len(whole[t][per]) for t in ask.tiers]
        if sum(counts) < need:
            return WAIT_GANG_NO_FIT
        tracked = index.tracks_racks(s, per)
        nodes: list[int] = []
        for t, c in zip(ask.tiers, counts, strict=True):
            take = min(c, need - len(nodes))
            if take <= 0:
                continue
            if tracked:
                rack = index.best_whole_rack(s, t, take)  # plan_whole_nodes' best fit, read off the index
                if rack is not None:
                    nodes.extend(islice(index.whole_by_rack(s, t)[rack], take))
                    continue
                spread = index.fewest_racks(s, t, take)  # and its fewest racks, read off the index
                assert spread is not None  # the tier holds at least ``take`` free nodes
                nodes.extend(spread)
                continue
            by_rack: dict[int, list[int]] = {}
            for n in index.nodes_with_free(s, t, per):
                by_rack.setdefault(rack_of[n], []).append(n)
            plan = plan_whole_nodes(by_rack, take)
            assert plan is not None  # the tier holds at least ``take`` free nodes
            nodes.extend(plan[0])
        racks = {rack_of[n] for n in nodes}
        level = "rack" if len(racks) == 1 else "cluster"
        return Bind(tuple(nodes), f"gang_{level}", level)

    def _spread(
        self, ask: PodAsk, index: FreeGpuIndex, t: int, bits: int, first: int, crowd: Mapping[int, int], replicas: int
    ) -> Bind | None:
        """The spread's node in tier ``t`` (``first``: the policy's class), or None to keep the policy's node."""
        assert self.spread is not None
        bucket = index.buckets[ask.sku][t]
        head = next(iter(bucket[first]))
        cap = self.spread.cap(replicas)
        if crowd.get(head, 0) < cap:
            return None  # the policy's node is under the cap: its decision stands

        def by_preference() -> Iterator[Iterator[int]]:
            yield iter(bucket[first])
            rest = bits & ~(1 << first)
            while rest:  # the policy's next choice among the classes left
                k = self.classes[ask.sku].choose_bits(ask.gpus, rest).free_gpus
                yield iter(bucket[k])
                rest &= ~(1 << k)

        node = self.spread.pick(by_preference(), crowd, cap)
        return None if node is None else Bind((node,), "replica_spread")

    def preempt(
        self,
        ask: PodAsk,
        running: Sequence[RunningJob],
        free_gpus_by_node: dict[int, int],
        now_s: int,
        wait_s: int,
        missed_requests: float = 0.0,
    ) -> PreemptionPlan | NoPreemption:
        """A plan to free one node for ``ask`` by evicting lower-priority work, if that wastes fewer GPU-hours
        than waiting ``wait_s`` for new capacity would cost (else :class:`NoPreemption`): the pod's idle GPUs,
        plus, for a serving replica, the ``missed_requests`` its fleet misses meanwhile (the world's estimate)
        priced at ``breach_cost_usd`` each and turned into GPU-hours at the SKU's ``gpu_usd_h``."""
        if not self.preemption:
            return NoPreemption(str(ask.pod), "preemption_disabled")
        if ask.gpus > ask.per_node:
            return NoPreemption(str(ask.pod), "gang_not_preempting")
        kind = WorkloadKind.SERVING if ask.serving else WorkloadKind.TRAINING
        req = PreemptRequest(str(ask.pod), kind, ask.priority, ask.gpus)
        plan = plan_preemption(req, running, free_gpus_by_node, now_s, self.grace_s)
        if isinstance(plan, NoPreemption):
            return plan
        if plan.lost_gpu_h > ask.gpus * wait_s / 3600 + self.waiting_miss_gpu_h(ask.sku, missed_requests):
            return NoPreemption(str(ask.pod), "waiting_is_cheaper")
        return plan

    def preempt_gang(
        self,
        ask: PodAsk,
        free_whole_nodes: int,
        pods_by_node: Mapping[int, Sequence[RunningJob]],
        now_s: int,
        wait_s: int,
    ) -> GangPreemptionPlan | NoPreemption:
        """Nodes to empty for the gang ``ask`` (training), given the ``free_whole_nodes`` it may use and busy
        nodes with every pod on them (``pods_by_node``), if the evicted work loses fewer GPU-hours than the gang's
        GPUs idle waiting ``wait_s`` for new nodes (else ``waiting_is_cheaper``)."""
        if not (self.preemption and self.gang_preemption):
            return NoPreemption(str(ask.pod), "preemption_disabled")
        if ask.gpus <= ask.per_node or ask.serving:
            return NoPreemption(str(ask.pod), "not_a_gang")
        if ask.per_node <= 0 or ask.gpus % ask.per_node:
            return NoPreemption(str(ask.pod), "gang_not_whole_nodes")
        req = PreemptRequest(str(ask.pod), WorkloadKind.TRAINING, ask.priority, ask.gpus)
        short = ask.gpus // ask.per_node - free_whole_nodes
        plan = plan_gang_preemption(req, short, pods_by_node, now_s, self.grace_s)
        if isinstance(plan, NoPreemption):
            return plan
        if plan.lost_gpu_h > ask.gpus * wait_s / 3600:
            return NoPreemption(str(ask.pod), "waiting_is_cheaper")
        return plan

    def waiting_miss_gpu_h(self, sku: int, missed_requests: float) -> float:
        """``missed_requests`` (requests a serving fleet misses while its replica waits) in GPU-hours of ``sku``:
        their cost at ``breach_cost_usd`` each over one GPU-hour's price (0 when either is unset)."""
        if missed_requests <= 0 or self.breach_cost_usd <= 0 or sku >= len(self.gpu_usd_h):
            return 0.0
        price = self.gpu_usd_h[sku]
        return missed_requests * self.breach_cost_usd / price if price > 0 else 0.0


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
        if (team, flavor) not in self.book.quotas:
            return Admission(team, flavor, gpus, "admit", "no_quota")
        return self.book.check(team, flavor, gpus)

    def check_and_hold(self, pod: int, team: str, flavor: str, gpus: int) -> Admission:
        """:meth:`check`, then :meth:`hold` if the book says ``admit`` (one call on the simulator's hot path).
        For a team with a quota and a pod that holds none."""
        a = self.book.check(team, flavor, gpus, record=True)  # on admit, QuotaBook.admit of it (no reclaims)
        if a.decision == "admit":
            self.held[pod] = (team, flavor, gpus)
        return a

    def hold(self, pod: int, decided: Admission) -> None:
        """Record ``pod``'s usage: ``decided`` is :meth:`check`'s ``admit`` for it, with no change since."""
        if pod in self.held or decided.reason == "no_quota":
            return
        if decided.decision != "admit":
            raise ValueError(f"pod {pod}: hold needs an admission, got {decided.decision} ({decided.reason})")
        team, flavor, gpus = decided.team, decided.flavor, decided.gpus
        self.book.admit(team, flavor, gpus, decided)
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
        that lose the fewest GPU-hours per GPU first (checkpoint-aware), serving never before training; then a pod
        the later ones made useless is spared (the last taken first), so every pod named is needed."""
        ranked = sorted(
            candidates,
            key=lambda j: (j.kind is WorkloadKind.SERVING, eviction_cost(j, now_s, grace_s).lost_gpu_h / j.gpus, j.id),
        )
        out: list[RunningJob] = []
        got = 0
        for j in ranked:
            if got >= reclaim.gpus:
                break
            out.append(j)
            got += j.gpus
        if got < reclaim.gpus:
            return []
        for j in reversed(out[:-1]):
            if got - j.gpus >= reclaim.gpus:
                got -= j.gpus
                out.remove(j)
        return [j.id for j in out]


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node offered to consolidation: ``used`` GPUs of ``gpus`` taken; ``source``: a launched node it may drain."""

    node: int
    gpus: int
    used: int
    source: bool


@dataclass(frozen=True, slots=True)
class PodView:
    """A running pod on a source node: ``movable`` (checkpointable training), and when it reports it ends."""

    pod: int
    node: int
    gpus: int
    movable: bool
    serving: bool
    started_s: int
    ends_s: int


@dataclass(frozen=True, slots=True)
class Drain:
    """Move ``moves`` (pod, destination node) to empty ``node``; saves ``saved_gpu_h`` for ``cost_gpu_h``."""

    node: int
    moves: tuple[tuple[int, int], ...]
    saved_gpu_h: float
    cost_gpu_h: float
    reason: str = "drain_pays"


def plan_drains(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    now_s: int,
    max_moves: int,
    idle_before_release_s: int,
    restart_s: int = 300,
) -> list[Drain]:
    """Consolidation through :func:`gpufleet.schedule.plan_consolidation`, kept only where it pays.

    The planner drains the least-used source nodes onto the fullest other nodes that fit (serving never moves,
    work that cannot checkpoint does not move, ``max_moves`` is the disruption budget). A drained node is kept
    only if the launched GPU-hours it frees (its GPUs from when it could be released, ``idle_before_release_s``
    from now, until its last pod would have ended) exceed the GPU-hours the moves cost (restart time)."""
    if not nodes or max_moves <= 0 or not any(p.movable for p in pods):
        return []
    row = {v.node: i for i, v in enumerate(nodes)}
    per = max(v.gpus for v in nodes)
    table = NodeTable.from_specs([NodeSpec(str(v.node), 0, 0, v.gpus, "g", 0, 0) for v in nodes])
    on_pods: dict[int, int] = {}
    running: list[RunningPod] = []
    for p in pods:
        slots = tuple(range(on_pods.get(p.node, 0), on_pods.get(p.node, 0) + p.gpus))
        on_pods[p.node] = on_pods.get(p.node, 0) + p.gpus
        req = _gpu_request(p.pod, p.gpus)
        table.allocate(row[p.node], req, slots)
        running.append(
            RunningPod(str(p.pod), req, row[p.node], slots, p.serving, p.movable, False, None, p.started_s, restart_s)
        )
    for v in nodes:  # usage the offered pods do not account for (pods on destination nodes)
        rest = v.used - on_pods.get(v.node, 0)
        if rest > 0:
            base = on_pods.get(v.node, 0)
            table.allocate(row[v.node], _gpu_request(-1, rest), tuple(range(base, base + rest)))
    src_rows = {row[v.node] for v in nodes if v.source}
    plan = plan_consolidation(table, [r for r in running if r.node in src_rows], now_s, max_moves)
    ends = {p.pod: p.ends_s for p in pods}
    by_node: dict[int, list[tuple[int, int, float]]] = {}
    for m in plan.moves:
        by_node.setdefault(m.from_node, []).append((int(m.pod_id), nodes[m.to_node].node, m.cost_gpu_h))
    out: list[Drain] = []
    for r, moves in by_node.items():
        last_end = max(ends[p] for p, _, _ in moves)
        saved = per * max(0, last_end - now_s - idle_before_release_s) / 3600
        cost = sum(c for _, _, c in moves)
        if saved > cost:
            out.append(Drain(nodes[r].node, tuple((p, d) for p, d, _ in moves), saved, cost))
    return out


def _gpu_request(pod: int, gpus: int) -> PodRequest:
    return PodRequest(f"pod{pod}", 0, 0, gpus, MILLI)
