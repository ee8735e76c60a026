"""Scheduling decisions for a world's pending pods: which node each pod (or whole gang) binds to, and why.

:class:`BindingPlanner` keeps one :class:`~gpufleet.schedule.Scheduler` (node table + packing policy) across
ticks and reconciles it with every :class:`Observation`: pods the world shows bound (by anyone) hold their
resources, a pod still terminating too; finished pods and pods gone release them; pods this planner decided to
bind but the world does not show bound yet are *in flight* and keep theirs until :meth:`BindingPlanner.confirm` /
:meth:`abort` or until they appear bound. So a node is never booked twice by this planner, and capacity another actor took is seen
on the next observation.

Order: singles and gangs by (priority desc, creation time, name). A gang (pods sharing a pod-group) is
decided only when ``gang_min`` members are pending, all-or-nothing through :func:`place_gang`. A single pod takes
room on the nodes of the first capacity type of ``tier_order`` where it fits (the loop's order of running
capacity, e.g. reserved -> spot -> on-demand: spot nodes are tainted, so only checkpointable pods reach them),
the packing policy choosing among those nodes. A gang takes the first capacity type of ``tier_order`` that holds
all of it (topology preference within it: ``schedule/gang.py``), else any mix of nodes.

Replica spread (``spread``: the loop's :class:`~gpufleet.control.placement.ReplicaSpread`; None: off): a serving
replica prefers, inside the capacity type the policy takes, a node holding fewer than the cap of its fleet's
replicas (bind reason ``replica_spread``; a preference only). The rule and its reading of fleets are in
``control/binding_spread.py``.

Decisions are data: :class:`PodBind` and :class:`Unschedulable` carry reason codes; the world applies them.

Priority preemption (:meth:`BindingPlanner.preempt`, the rules in ``control/preempting.py``, the reservation of the
victims' room in ``control/binding_preempt.py``): for pods and gangs the plan left unschedulable, a
:class:`~gpufleet.control.preempting.PreemptDecision` names victims to evict and their room is reserved for the
preemptor at once; :meth:`plan` binds it there once every victim is gone (reason ``preempted_room``). :meth:`cancel`
drops a reservation whose evictions failed (victims a budget refused are barred a while: ``RefusalBackoff``); one
older than ``preempt_cfg.hold_s`` is dropped by :meth:`plan` (reason ``reservation_expired`` in ``dropped``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.control.binding_preempt import _Reservation, plan_preemptions
from gpufleet.control.binding_spread import place_spread, serving_fleet, spread_fleets
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.control.placement import ReplicaSpread
from gpufleet.control.preempting import (
    NoPreempt,
    PreemptConfig,
    PreemptDecision,
    RefusalBackoff,
    TableHold,
)
from gpufleet.schedule.gang import GangInfeasible, GangPlacement, GangRequest, place_gang
from gpufleet.schedule.policies import best_fit_gpus
from gpufleet.schedule.scheduler import Placement, Scheduler, make_policy
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest


@dataclass(frozen=True, slots=True)
class PodBind:
    pod: str  # namespace/name
    uid: str
    node: str
    gpu_slots: tuple[int, ...]
    gang: str = ""
    reason: str = "placed"


@dataclass(frozen=True, slots=True)
class Unschedulable:
    pod: str
    reason: str  # insufficient_gpu | gang_incomplete | no_schedulable_nodes | ... (schedule's codes)
    gang: str = ""


@dataclass(frozen=True, slots=True)
class BindingPlan:
    binds: tuple[PodBind, ...]
    unschedulable: tuple[Unschedulable, ...]
    over_capacity: tuple[str, ...] = ()  # pods the world shows bound where they do not fit (another actor)
    remaining: int = 0  # units (pods or gangs) left undecided because of ``max_units``


_Held = TableHold


@dataclass
class BindingPlanner:
    """See the module docstring. ``scheduler_name`` selects the pods this planner owns."""

    scheduler_name: str = "gpufleet"
    policy: str = "gpufleet"
    seed: int = 0
    tier_order: tuple[str, ...] = ()  # capacity types (karpenter.sh/capacity-type) in order of preference
    _sched: Scheduler | None = None
    _prefer: tuple[npt.NDArray[np.bool_], ...] = ()
    _node_key: tuple[object, ...] = ()
    _held: dict[str, _Held] = field(default_factory=dict)  # pod uid -> what it holds in the table
    _in_flight: set[str] = field(default_factory=set)
    rebuilds: int = 0
    preempt_cfg: PreemptConfig = field(default_factory=PreemptConfig)
    _reserved: dict[str, _Reservation] = field(default_factory=dict)  # decision key -> reservation
    _doomed: set[str] = field(default_factory=set)  # victim uids: hold nothing, their room is reserved
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (decision key, reason) of dropped reservations
    _refusals: RefusalBackoff = field(default_factory=RefusalBackoff)  # victims their budget refused: barred a while
    spread: ReplicaSpread | None = None  # the loop's replica spread (module docstring); None: off

    @property
    def table(self) -> NodeTable | None:
        return None if self._sched is None else self._sched.table

    def _specs(self, nodes: list[ObservedNode], pods: list[ObservedPod]) -> list[NodeSpec]:
        words = {w for p in pods for w in p.request.node_selector}  # only labels a pod selects on
        out = []
        for n in nodes:
            s = n.spec
            out.append(
                NodeSpec(s.name, s.cpu_milli, s.memory_mib, s.gpu_count, s.gpu_model, s.rack, s.nvlink_domain,
                         tuple(w for w in s.labels if w in words), s.taints)
            )  # fmt: skip
        return out

    def _sync_nodes(self, obs: Observation, pending: list[ObservedPod]) -> bool:
        nodes = sorted((n for n in obs.nodes if n.schedulable), key=lambda n: n.name)
        if not nodes:
            self._sched = None
            return False
        specs = self._specs(nodes, pending)
        key = (*specs, *(n.capacity_type for n in nodes))
        if self._sched is None or key != self._node_key:
            old = self._sched.table if self._sched is not None else None
            flying = (
                [(uid, old.names[h.node], h) for uid, h in self._held.items() if uid in self._in_flight] if old else []
            )
            table = NodeTable.from_specs(specs)
            self._sched = Scheduler(table, make_policy(self.policy, table), np.random.default_rng(self.seed))
            kinds = np.array([n.capacity_type for n in nodes])  # nodes in table order
            self._prefer = tuple(kinds == c for c in self.tier_order)
            self._node_key = key
            self._held.clear()  # bound pods are re-derived from the observation in _reconcile
            index = {n: i for i, n in enumerate(table.names)}
            for uid, name, h in flying:  # decided, not yet seen bound: keep holding on the new table
                node = index.get(name)
                ok = (
                    node is not None
                    and h.request.num_gpu == len(h.slots)
                    and all(
                        g < table.gpu_count[node] and table.gpu_left_milli[node, g] >= h.request.gpu_milli
                        for g in h.slots
                    )
                )
                if node is not None and ok and table.feasible(h.request)[node]:
                    table.allocate(node, h.request, h.slots)
                    self._held[uid] = _Held(node, h.request, h.slots)
                else:
                    self._in_flight.discard(uid)  # its node went away: the world will refuse or we re-decide
            self.rebuilds += 1
        return True

    def _request(self, pod: ObservedPod, table: NodeTable) -> PodRequest:
        taints = {w for w in table.bit_of if ":" in w}
        tol = tuple(sorted(t for t in taints if pod.tolerates(t)))
        r = pod.request
        return PodRequest(r.name, r.cpu_milli, r.memory_mib, r.num_gpu, r.gpu_milli, r.gpu_models, r.node_selector, tol)

    def _reconcile(self, obs: Observation, sched: Scheduler) -> list[str]:
        table = sched.table
        index = {n: i for i, n in enumerate(table.names)}
        # a bound pod holds its node's resources until it is finished or gone, terminating included (its GPUs are
        # still allocated on the node: kube-scheduler counts them too)
        bound = {p.uid: p for p in obs.pods if p.node and p.phase not in ("Succeeded", "Failed")}
        seen = {p.uid for p in obs.pods if p.active}
        self._in_flight -= set(bound)  # the world shows them bound: no longer in flight
        self._in_flight &= seen  # deleted / finished meanwhile
        for uid in list(self._held):
            if uid not in bound and uid not in self._in_flight:
                h = self._held.pop(uid)
                table.release(h.node, h.request, h.slots)
        over: list[str] = []
        present = {p.uid for p in obs.pods if p.phase not in ("Succeeded", "Failed")}
        self._doomed &= present  # gone: nothing more to skip
        for uid, p in bound.items():
            if uid in self._doomed:
                continue  # a victim being evicted: its room is reserved for its preemptor
            node = index.get(p.node)
            if uid in self._held:
                if node is not None and self._held[uid].node == node:
                    continue
                h = self._held.pop(uid)  # bound elsewhere than planned (another actor): follow the world
                table.release(h.node, h.request, h.slots)
            if node is None:
                continue  # on a node not schedulable now (cordoned, lost): holds nothing we schedule on
            req = self._request(p, table)
            left = table.gpu_left_milli[node]
            slots = p.gpu_slots
            ok_slots = len(slots) == req.num_gpu and all(
                0 <= g < table.gpu_count[node] and left[g] >= req.gpu_milli for g in slots
            )
            if not ok_slots:
                slots = best_fit_gpus(table, node, req)
            fits = (
                len(slots) == req.num_gpu
                and table.cpu_left_milli[node] >= req.cpu_milli
                and table.mem_left_mib[node] >= req.memory_mib
                and all(left[g] >= req.gpu_milli for g in slots)
            )
            if not fits:
                over.append(p.key)
                continue
            table.allocate(node, req, slots)
            self._held[uid] = _Held(node, req, slots)
        return over

    def plan(
        self, obs: Observation, *, max_units: int | None = None, exclude: frozenset[str] = frozenset()
    ) -> BindingPlan:
        """Decide binds for this planner's pending pods; what is decided is held in the table (in flight).

        ``max_units`` decides only the first that many units (pods or whole gangs) in scheduling order and
        reports the rest as ``remaining``; call again with the keys already decided in ``exclude`` to continue
        on the same observation (the world can start binding meanwhile). The decisions are the same as one
        call without a limit."""
        mine = [
            p
            for p in obs.pods
            if p.key not in exclude
            and p.active
            and not p.node
            and not p.gated
            and p.scheduler_name == self.scheduler_name
            and p.uid not in self._in_flight
        ]
        if not self._sync_nodes(obs, mine):
            return BindingPlan((), tuple(Unschedulable(p.key, "no_schedulable_nodes", p.gang) for p in mine))
        sched = self._sched
        assert sched is not None
        over = self._reconcile(obs, sched)
        binds: list[PodBind] = self._release_reserved(obs)
        mine = [p for p in mine if p.uid not in self._in_flight]
        gangs: dict[str, list[ObservedPod]] = {}
        units: list[tuple[tuple[int, str, str], list[ObservedPod]]] = []
        for p in mine:
            if p.gang:
                gangs.setdefault(f"{p.namespace}/{p.gang}", []).append(p)
            else:
                units.append(((-p.priority, p.created, p.key), [p]))
        for members in gangs.values():
            first = min(members, key=lambda m: (-m.priority, m.created, m.key))
            units.append(((-first.priority, first.created, first.key), sorted(members, key=lambda m: m.key)))
        units.sort(key=lambda u: u[0])
        remaining = 0
        if max_units is not None and len(units) > max_units:
            remaining = len(units) - max_units
            units = units[:max_units]
        unsched: list[Unschedulable] = []
        singles = [u[1][0] for u in units if not u[1][0].gang]
        fleets = spread_fleets(self.spread, obs, singles, sched.table, self._held, self._doomed)
        for _, members in units:
            if members[0].gang:
                self._plan_gang(sched, members, binds, unsched)
                continue
            p = members[0]
            fleet = fleets.get(serving_fleet(p)) if fleets else None
            got = place_spread(sched, self._request(p, sched.table), self._prefer, fleet, self.spread, self.tier_order)
            if isinstance(got, Placement):
                if fleet is not None:
                    fleet.crowd[got.node] = fleet.crowd.get(got.node, 0) + 1
                binds.append(PodBind(p.key, p.uid, got.node_name, got.gpu_slots, reason=got.reason))
                self._held[p.uid] = _Held(got.node, got.request, got.gpu_slots)
                self._in_flight.add(p.uid)
            else:
                unsched.append(Unschedulable(p.key, got.reason))
        return BindingPlan(tuple(binds), tuple(unsched), tuple(over), remaining)

    def _plan_gang(
        self, sched: Scheduler, members: list[ObservedPod], binds: list[PodBind], unsched: list[Unschedulable]
    ) -> None:
        gang = members[0].gang
        need = max(m.gang_min for m in members) or len(members)
        if len(members) < need:
            unsched.extend(Unschedulable(m.key, "gang_incomplete", gang) for m in members)
            return
        reqs = tuple(self._request(m, sched.table) for m in members)
        request = GangRequest(f"{members[0].namespace}/{gang}", reqs)
        got: GangPlacement | GangInfeasible | None = None
        for mask in self._prefer:  # the whole gang on one capacity type, in the loop's order
            if mask.any():
                got = place_gang(sched.table, request, mask)
                if isinstance(got, GangPlacement):
                    break
        if not isinstance(got, GangPlacement):
            got = place_gang(sched.table, request)  # across capacity types
        if not isinstance(got, GangPlacement):
            unsched.extend(Unschedulable(m.key, got.reason, gang) for m in members)
            return
        for m, r, node, slots in zip(members, reqs, got.nodes, got.gpu_slots, strict=True):
            binds.append(PodBind(m.key, m.uid, sched.table.names[node], slots, gang, f"gang_{got.level}"))
            self._held[m.uid] = _Held(node, r, slots)
            self._in_flight.add(m.uid)

    # -- priority preemption (module docstring) ---------------------------------------------------------
    def _release_reserved(self, obs: Observation) -> list[PodBind]:
        """Binds for reservations whose victims are gone; drop those that lost a member or expired."""
        present = {p.uid for p in obs.pods if p.phase not in ("Succeeded", "Failed")}
        out: list[PodBind] = []
        for key, r in list(self._reserved.items()):
            if any(uid not in self._in_flight for _, uid, _ in r.members):
                self._drop(key, "preemptor_changed")  # deleted, or bound by someone else, or its node went away
            elif obs.now_s - r.at_s > self.preempt_cfg.hold_s:
                self._drop(key, "reservation_expired")
            elif not (r.victims & present):
                del self._reserved[key]
                for pod, uid, gang in r.members:
                    h = self._held[uid]
                    name = self._sched.table.names[h.node] if self._sched is not None else ""
                    out.append(PodBind(pod, uid, name, h.slots, gang, "preempted_room"))
        return out

    def _drop(self, key: str, reason: str) -> None:
        r = self._reserved.pop(key, None)
        if r is None:
            return
        self.dropped.append((key, reason))
        del self.dropped[:-100]  # the latest only
        self._doomed -= r.victims  # still bound ones are held again at the next reconcile
        for _, uid, _ in r.members:
            if uid in self._in_flight:
                self._in_flight.discard(uid)
                h = self._held.pop(uid, None)
                if h is not None and self._sched is not None:
                    self._sched.table.release(h.node, h.request, h.slots)

    def cancel(
        self,
        decision: PreemptDecision,
        reason: str = "eviction_failed",
        *,
        refused: Collection[str] = (),
        at_s: float | None = None,
    ) -> None:
        """The world could not evict ``decision``'s victims (checkpoint timeout, PDB): give the room back. ``refused``:
        the victims (uids) their PodDisruptionBudget refused at ``at_s`` (None: when decided), offered to no
        preemptor for a while (``RefusalBackoff``)."""
        r = self._reserved.get(decision.key)
        at = at_s if at_s is not None else (r.at_s if r is not None else 0.0)
        for uid in refused:
            self._refusals.refused(uid, at, self.preempt_cfg)
        self._drop(decision.key, reason)

    def reserved(self) -> tuple[PreemptDecision, ...]:
        return tuple(r.decision for r in self._reserved.values())

    def preempt(
        self, obs: Observation, unschedulable: tuple[Unschedulable, ...], max_decisions: int | None = None
    ) -> tuple[tuple[PreemptDecision, ...], tuple[NoPreempt, ...]]:
        """After :meth:`plan` on ``obs``: preemption decisions for its ``unschedulable`` pods and gangs, in their
        order (priority first), at most ``max_decisions`` (default ``preempt_cfg.max_decisions``); each one's room
        reserved (module docstring). Pods and gangs that get none are listed with the reason code."""
        return plan_preemptions(self, obs, unschedulable, max_decisions)

    def confirm(self, bind: PodBind) -> None:
        """The world accepted ``bind`` (kept held until the observation shows the pod bound)."""
        return None

    def abort(self, bind: PodBind) -> None:
        """The world refused ``bind`` (pod gone, already bound elsewhere): give its resources back."""
        self._in_flight.discard(bind.uid)
        h = self._held.pop(bind.uid, None)
        if h is not None and self._sched is not None:
            self._sched.table.release(h.node, h.request, h.slots)

    def unallocated_gpu_milli(self) -> int:
        t = self.table
        return 0 if t is None else int(t.gpu_left_milli.sum())
