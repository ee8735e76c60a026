"""Which idle launched GPU nodes of a Kubernetes cluster to release: the loop's node scaler on an observation.

The simulator's gpufleet loop scales nodes down with its node scaler (``ControlLoop.gpufleet(...).node_scaler``,
:class:`~gpufleet.autoscale.nodes_payoff.PayoffAwareNodes`: nothing goes while work of the SKU is pending, an idle
node is held while the rent-or-buy rule says a relaunch would cost more, capped by the SKU's recent need for fresh
nodes). In a cluster where Karpenter launches the nodes, :class:`NodeReleasePlanner` asks that same scaler through
``ports.NodeScaler.scale_down``, one :class:`~gpufleet.ports.ScaleDownContext` per GPU product, built from an
:class:`~gpufleet.control.observation.Observation`:

- idle nodes: Ready, uncordoned GPU nodes of a launched capacity type (``on-demand``, ``spot``; ``reserved`` is paid
  whether used or not) with no active pod bound but DaemonSet and static pods (:func:`node_bound`: they run on every
  node and go with it, as Cluster Autoscaler and Karpenter read an empty node), idle at least the scaler's
  ``min_idle_s`` by this planner's watch (a node first seen idle counts from then), priced at the catalog's price
  of its product and capacity type; a parked node (gpufleet's own cordon, ``ObservedNode.own_cordon``: a node a
  consolidation drained, or one a release cordoned and did not get to delete, a crash or a lost Lease between)
  that is Ready, of a launched capacity type and empty counts as such an idle node (below);
- pending work: GPU pods not bound, of a scheduler that places pods on these nodes (``schedulers``: the
  controller's and the default scheduler; a pod of a scheduler nobody runs would hold every node forever), that
  may run on the product (:func:`~gpufleet.control.gang_reach.pod_products`: no GPU model asked nor ``nvidia.com/gpu.product`` selected, or
  this one);
- the wait a relaunch causes is priced at the product's on-demand price, as in the simulator;
- ``fresh_nodes``: launched nodes of the product that joined since the last plan (Karpenter's launches for
  pending work), the need the scaler's hold cap counts; the first observation counts none;
- ``unreachable_gang_gpus`` (as the simulator's ``Provisioner.unreachable_gang_gpus``): the GPUs of the product's
  pending pods when every one of them is in a gang that cannot complete from what is at hand, its free GPUs and
  the room its Karpenter NodePools may still launch, by its pods' tolerations (``control/gang_reach.py``); the
  scaler then lets idle nodes go by its rent-or-buy holds (``pending_gang_out_of_reach``) instead of holding all
  of them.

The hold half of the loop's start buffer (``buffer``, ``ControlLoop.gpufleet(...).start_buffer``,
:class:`~gpufleet.control.start_buffer.StartBuffer`): hourly by the observation's clock (the first plan at once),
over the products, the buffer decides on the training jobs of the planner's schedulers that arrived in its window
and those that started late (:func:`~gpufleet.control.buffer_reading.late_starts`: creation time against ``status.startTime``, or against now while
unbound), each product priced at its on-demand list price x its GPUs per node; each context then asks
``keep_free_gpus`` = its nodes x the product's GPUs per node, with ``buffer_free_gpus`` the free GPUs on the
product's uncordoned nodes that are not spot (reserved and on-demand), so the scaler keeps idle nodes that hold the
buffer (``ports.within_buffer``). With ``StartBuffer.spot``, a product with spot capacity (a spot list price in the
catalog, and a spot node of it or, NodePools observed, a NodePool that may launch it on spot:
:func:`~gpufleet.control.buffer_reading.spot_capacity`) is read as two lanes: the product over the pods that do not tolerate gpufleet's spot taint
(:data:`~gpufleet.control.buffer_pods.SPOT_TAINT`), its spot lane (``spot_lane(product)``, checkpointed training)
over those that do (a gang by its pods: in the spot lane if a member tolerates it), priced at the spot list price
x its GPUs per node; its context asks ``keep_free_spot_gpus`` = the spot lane's nodes x GPUs per node, with
``spot_free_gpus`` the free GPUs on the product's uncordoned spot nodes, so the scaler keeps idle spot nodes for
it. The last decision per key (product or spot lane) is kept in ``buffer_decisions``. The top-up half (the
simulator's ``Provisioner.top_up_buffer``) is :mod:`gpufleet.control.buffer_pods`: placeholder pods
(``ObservedPod.buffer``) of a negative PriorityClass that make Karpenter launch the missing nodes. Here a
placeholder is no training job for ``late_starts``, no pending work (``pending_gpus``, gangs' reach) and its GPUs
count as free (``free_gpus``, ``buffer_free_gpus``, ``spot_free_gpus``, a gang's reach: any real pod may preempt
it), but its node is busy: never offered for release while it holds one.

Parked nodes (:meth:`NodeReleasePlanner.decide`). A node gpufleet cordoned is used by nothing (the scheduler skips
it) and, with ``release: gpufleet``, emptied by no Karpenter: left alone it would be paid for good. So each round
a parked node, but one a drain is emptying now (``draining``, the controller's consolidation in flight), is
either released or uncordoned: empty (by the rule above: DaemonSet and static pods do not count), Ready and
launched, it is an idle node by the same rules as any (idle from when the watch first saw it so, the scaler's
``min_idle_s`` before it is offered, so pods just evicted from it find their new places first; the rent-or-buy
hold; pending work; the start buffer): let go, it is released (``NodeRelease.parked``: deleted without a new
cordon); kept, it is uncordoned (``held_by_node_scaler``: the scaler keeps it for work to come, which a
cordoned node cannot take; from then on it is an ordinary idle node). A parked node that cannot be offered (it
runs work, a drain cut short; not of a launched capacity type; not Ready; a CPU node, which consolidation drains
too) is uncordoned once the watch has seen it parked ``own_cordon_grace_s`` (:data:`OWN_CORDON_GRACE_S`, 900 s;
``own_cordon_expired``). Only gpufleet's own cordon is ever undone: an administrator's (no mark) is not a parked
node, never offered nor uncordoned.

Restarts: on its first round (a controller started, or took the Lease: the controller makes a new planner for each
of its Lease terms, as another leader may have used the nodes meanwhile) the planner has no watch of its own, so
it reads the one the last controller left on the nodes (:func:`marked_since`): an empty node's idle spell from
``ObservedNode.idle_s`` (the controller writes :meth:`NodeReleasePlanner.idle_marks` on the nodes), else, parked,
from ``parked_s`` (written with gpufleet's cordon), as does a parked node's grace; each held between the node's
creation and now, no earlier than the start of the last pod observed on the node (a finished one too: the last
controller may have lost the lead or crashed before it saw the node used and removed its mark), and never for a
busy node.

Node start (``node_start_s``) is one setting for the cluster, the controller's (the simulator reads it per pool).
Decisions are data (:class:`NodeRelease`, with the scaler's reason code; :class:`NodeUncordon`); the controller
cordons, checks that the node is still empty and deletes it, or undoes its own cordon
(``adapters/kubernetes/controller.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from gpufleet.control.buffer_pods import buffer_free_gpus, real_used_gpus
from gpufleet.control.buffer_reading import late_starts, spot_capacity
from gpufleet.control.gang_reach import (
    ProductReach,
    may_run,
    pod_products,
    product_reach,
    unreachable_gang_gpus,
    unreachable_gangs,
)
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.control.replica_victims import node_price_usd_h
from gpufleet.control.start_buffer import BufferDecision, LateReading, StartBuffer, spot_lane
from gpufleet.domain.catalog import sku_for
from gpufleet.domain.pools import Tier
from gpufleet.ports import IdleNode, NodeScaler, PriceCatalog, ScaleDownContext

LAUNCHED = {"on-demand": Tier.ON_DEMAND, "spot": Tier.SPOT}
BUFFER_EVERY_S = 3600  # the start buffer is stepped hourly, as in the simulator (Provisioner.hold_buffer)
FORGET_AFTER_S = 3600  # a node name not observed for this long is forgotten (its id, its join): names do not come back
NODE_BOUND_OWNERS = ("DaemonSet", "Node")  # a DaemonSet's pod; a static pod's mirror (owned by its Node)
# gpufleet's own cordon on a node that cannot be offered for release (it still runs work, is reserved or not Ready)
# is undone after this long by the planner's watch (a drain or release cut short by a crash or a lost Lease)
OWN_CORDON_GRACE_S = 900
HELD_PARKED = "held_by_node_scaler"  # a parked node the scaler keeps: uncordoned, so that work can use it
PARKED_EXPIRED = "own_cordon_expired"  # a parked node past the grace that cannot be released: uncordoned


def node_bound(p: ObservedPod) -> bool:
    """A DaemonSet or static pod: it runs on its node whatever runs there and goes with the node, so it does not
    keep the node busy (a GPU device plugin's pod is on every GPU node)."""
    return p.owner_kind in NODE_BOUND_OWNERS


def busy_nodes(pods: Iterable[ObservedPod]) -> set[str]:
    """The nodes an active pod is bound to, DaemonSet and static pods aside (:func:`node_bound`): the others are
    empty, as the release reads a node."""
    return {p.node for p in pods if p.node and p.active and not node_bound(p)}


def marked_since(mark: float | None, n: ObservedNode, now: float, obs_now: float, used_s: float | None = None) -> int:
    """A time a node carries (``mark``: Unix seconds, ``ObservedNode.parked_s`` or ``idle_s``) on the planner's
    clock (``now``; the observation's ``obs_now``), for a planner that has not watched the node (its first round: a
    controller restarted, or a new Lease holder), held between the node's creation and now: a mark moved back
    (anyone who may patch nodes can write it) counts no more than the node's age, one moved ahead no less than 0;
    and no earlier than ``used_s``, the start of the last pod observed on the node (a finished one too: a mark is
    written on an idle node, so a pod started after it ran on the node since, while no controller watched to remove
    the mark); ``now`` without a readable mark or a creation time."""
    if mark is None or n.created_s is None:
        return int(now)
    at = min(max(mark, n.created_s, used_s if used_s is not None else mark), obs_now)
    return int(now - (obs_now - at))


def last_used(pods: Iterable[ObservedPod]) -> dict[str, float]:
    """Per node, the latest start of a pod observed bound to it (any phase; DaemonSet and static pods aside)."""
    out: dict[str, float] = {}
    for p in pods:
        if p.node and p.started_s is not None and not node_bound(p):
            out[p.node] = max(out.get(p.node, p.started_s), p.started_s)
    return out


def _offerable(n: ObservedNode, busy: Collection[str]) -> bool:
    """Whether a parked node may be offered for release as an idle node: a GPU node, Ready, of a launched capacity
    type, empty."""
    return bool(n.sku) and n.spec.gpu_count > 0 and n.ready and n.capacity_type in LAUNCHED and n.name not in busy


@dataclass(frozen=True, slots=True)
class NodeRelease:
    """An idle launched node to release, with the node scaler's reason code."""

    node: str
    sku: str  # GPU product
    reason: str
    idle_for_s: int
    parked: bool = False  # already cordoned by gpufleet (a drained node, a release cut short): delete, no cordon


@dataclass(frozen=True, slots=True)
class NodeUncordon:
    """A node whose own cordon gpufleet undoes (a parked node: :attr:`ObservedNode.own_cordon`), with the reason:
    ``held_by_node_scaler`` (empty, offered, and the scaler keeps it: kept capacity must take work) or
    ``own_cordon_expired`` (parked ``OWN_CORDON_GRACE_S`` and not releasable: it runs work, is not of a launched
    capacity type or is not Ready)."""

    node: str
    sku: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReleaseRound:
    """One release round's decisions: the nodes to delete and the parked nodes to uncordon."""

    releases: tuple[NodeRelease, ...]
    uncordons: tuple[NodeUncordon, ...]


@dataclass(slots=True)
class NodeReleasePlanner:
    """The loop's node scaler asked on observations (module docstring). Keeps, across plans, when each node was
    first seen idle, a stable id per node name (the scaler follows idle spells by id) and the nodes already seen,
    each until the node has not been observed for ``FORGET_AFTER_S`` (Karpenter names every node anew: a memory of
    every name ever seen grows for as long as the controller runs). With the loop's start buffer (``buffer``), the
    last decision per product (``buffer_decisions``) and when the buffer was last stepped.

    Durations (idle spells, the buffer's hour, the scaler's ``now_s``) run on the planner's own clock, which never
    goes back: the observation's time advanced by ``steady_s`` (a ``time.monotonic()`` reading the controller passes
    with each observation) where given, else the observation's time clamped to never go back. A wall clock stepped
    back (NTP) then neither makes an idle time negative nor runs the scaler's records backwards; one stepped forward
    does not age idle nodes with ``steady_s``. Times compared with the API server's timestamps (a node's creation, a
    pod's) stay the observation's. Idle times and the context's ``now_s`` count whole seconds of the same instant."""

    scaler: NodeScaler
    catalog: PriceCatalog
    node_start_s: int = 600
    sku_map: dict[str, str] = field(default_factory=dict)  # GPU product -> catalog SKU where names do not say
    schedulers: frozenset[str] = frozenset({"gpufleet", "default-scheduler"})  # whose pending pods hold nodes
    buffer: StartBuffer | None = None  # the loop's start buffer (ControlLoop.gpufleet(...).start_buffer); None: off
    buffer_decisions: dict[str, BufferDecision] = field(default_factory=dict)  # the last one per GPU product
    _buffer_at: float | None = None
    _idle_since: dict[str, int] = field(default_factory=dict)
    _ids: dict[str, int] = field(default_factory=dict)
    _names: dict[int, str] = field(default_factory=dict)
    _next_id: int = 0
    _seen: dict[str, float] | None = None  # launched node -> when last observed (the planner's clock)
    _observed: dict[str, float] = field(default_factory=dict)  # node with an id -> when last observed
    _clock: tuple[float, float] | None = None  # (observation time, steady_s) of the first plan given steady_s
    _now: float | None = None  # the planner's clock at the last plan
    own_cordon_grace_s: int = OWN_CORDON_GRACE_S  # a parked node that cannot be released is uncordoned after it
    _parked_since: dict[str, int] = field(default_factory=dict)  # parked node -> first seen parked (not draining)
    _obs_now: float | None = None  # the last observation's time

    def idle_marks(self) -> dict[str, int]:
        """The idle spells this planner watches (GPU nodes, empty, schedulable or parked), each as the Unix time it
        began (the last observation's time less the spell's length): what the controller writes on its node
        (``gpufleet.io/idle-since``) for the next controller to read (:func:`marked_since`)."""
        if self._now is None or self._obs_now is None:
            return {}
        return {name: int(self._obs_now - (self._now - since)) for name, since in self._idle_since.items()}

    def plan(
        self, obs: Observation, steady_s: float | None = None, draining: Collection[str] = ()
    ) -> tuple[NodeRelease, ...]:
        """The nodes to release (:meth:`decide`'s releases)."""
        return self.decide(obs, steady_s, draining).releases

    def decide(self, obs: Observation, steady_s: float | None = None, draining: Collection[str] = ()) -> ReleaseRound:
        """One round: the scaler on each product's context (:meth:`contexts`); the idle nodes it lets go are
        released. Parked nodes (gpufleet's own cordon, :attr:`ObservedNode.own_cordon`; those in ``draining``,
        a drain in flight, are left alone): an empty one is offered as an idle node; let go, it is released
        (``parked``: already cordoned); kept, it is uncordoned (``held_by_node_scaler``). A parked node that
        cannot be offered (it runs work, is not of a launched capacity type or is not Ready) is uncordoned once
        parked ``own_cordon_grace_s`` by the planner's watch (``own_cordon_expired``)."""
        releases: list[NodeRelease] = []
        uncordons: list[NodeUncordon] = []
        offered: set[str] = set()
        for ctx in self.contexts(obs, steady_s=steady_s, draining=draining):
            names_by_id = {i.node_id: i for i in ctx.idle}
            let_go: set[int] = set()
            for node_id, reason in self.scaler.scale_down(ctx):
                i = names_by_id.get(node_id)
                if i is not None:
                    name = self._names[node_id]
                    releases.append(NodeRelease(name, ctx.sku_id, reason, i.idle_for_s, name in self._parked_since))
                    let_go.add(node_id)
            for i in ctx.idle:
                name = self._names[i.node_id]
                if name in self._parked_since:
                    offered.add(name)
                    if i.node_id not in let_go:
                        uncordons.append(NodeUncordon(name, ctx.sku_id, HELD_PARKED))
        now = self._now if self._now is not None else obs.now_s
        busy = busy_nodes(obs.pods)
        by_name = {n.name: n for n in obs.nodes}
        for name, since in sorted(self._parked_since.items()):
            n = by_name.get(name)
            if n is None or name in offered or _offerable(n, busy) or now - since < self.own_cordon_grace_s:
                continue
            uncordons.append(NodeUncordon(name, n.sku, PARKED_EXPIRED))
        return ReleaseRound(tuple(releases), tuple(uncordons))

    def contexts(
        self,
        obs: Observation,
        min_idle_s: int | None = None,
        steady_s: float | None = None,
        draining: Collection[str] = (),
    ) -> tuple[ScaleDownContext, ...]:
        """What :meth:`plan` asks the scaler, one context per GPU product (sorted), without asking it: the watch
        (idle spells, joins, parked nodes) advances as in a plan. ``min_idle_s``: offer nodes idle at least this
        long by the watch (None: the scaler's ``min_idle_s``, as :meth:`plan`; 0: every idle launched node).
        ``steady_s``: a monotonic reading taken with the observation (the class docstring). ``draining``: nodes
        a drain is emptying now (not parked, not offered). A parked node (:meth:`decide`) that is Ready and empty
        counts as an idle node of its product, as if uncordoned (its idle spell, the capacity, the free GPUs)."""
        first = self._now is None  # a controller just started (or just took the Lease): no watch of its own yet
        now = self._tick(obs.now_s, steady_s)
        self._obs_now = obs.now_s
        least = self.scaler.min_idle_s if min_idle_s is None else min_idle_s
        bound = [p for p in obs.pods if p.node and p.active]
        busy = busy_nodes(bound)
        gpu_nodes = [n for n in obs.nodes if n.sku and n.spec.gpu_count > 0]
        fresh = self._fresh(gpu_nodes, now)
        last_use = last_used(obs.pods) if first else {}
        for n in obs.nodes:  # every node a drain may have cordoned: a CPU node too (uncordoned after the grace)
            if n.own_cordon and n.name not in draining:
                if n.name not in self._parked_since:
                    since = marked_since(n.parked_s, n, now, obs.now_s, last_use.get(n.name))
                    self._parked_since[n.name] = since if first else int(now)
            else:
                self._parked_since.pop(n.name, None)
        parked = {n.name for n in gpu_nodes if n.name in self._parked_since and _offerable(n, busy)}
        for n in gpu_nodes:
            if n.name in busy or not (n.schedulable or n.name in parked):
                self._idle_since.pop(n.name, None)
            elif n.name not in self._idle_since:  # at start: idle since its mark, a parked one at least since parked
                mark = n.idle_s if n.idle_s is not None or n.name not in parked else n.parked_s
                since = marked_since(mark, n, now, obs.now_s, last_use.get(n.name)) if first else int(now)
                self._idle_since[n.name] = since
        names = {n.name for n in gpu_nodes}
        for gone in [k for k in self._idle_since if k not in names]:
            del self._idle_since[gone]
        observed = {n.name for n in obs.nodes}
        for gone in [k for k in self._parked_since if k not in observed]:
            del self._parked_since[gone]
        self._forget(names, now)
        pending = [
            p
            for p in obs.pods
            if not p.node
            and p.active
            and not p.gated
            and p.request.num_gpu > 0
            and p.scheduler_name in self.schedulers
            and not p.buffer  # a pending placeholder is the buffer's own request for a node, not work that waits
        ]
        used = real_used_gpus(bound)  # a GPU share holds its GPU; a placeholder's GPUs are free (it yields them)
        reaches: dict[frozenset[tuple[tuple[str, str, str, str], ...]], dict[str, ProductReach]] = {}

        def reach(members: Sequence[ObservedPod]) -> dict[str, ProductReach]:  # by the members' tolerations
            key = frozenset(m.tolerations for m in members)
            if key not in reaches:
                reaches[key] = product_reach(obs, gpu_nodes, pending, used, members)
            return reaches[key]

        out_of_reach = unreachable_gangs(pending, bound, reach) if any(p.gang for p in pending) else frozenset()
        products = sorted({n.sku for n in gpu_nodes})
        per_node: dict[str, int] = {}
        for n in gpu_nodes:
            per_node[n.sku] = max(per_node.get(n.sku, 0), n.spec.gpu_count)
        self._step_buffer(obs, gpu_nodes, per_node, now)
        out: list[ScaleDownContext] = []
        for sku in products:
            mine = [n for n in gpu_nodes if n.sku == sku and (n.schedulable or n.name in parked)]
            idle = [
                self._idle(n, now, obs.now_s)
                for n in mine
                if n.capacity_type in LAUNCHED and n.name in self._idle_since
            ]
            offered = [i for i in idle if i.idle_for_s >= least]
            mine_pending = [p for p in pending if may_run(pod_products(p), sku)]
            capacity = sum(n.spec.gpu_count for n in mine)
            in_use = sum(min(used.get(n.name, 0), n.spec.gpu_count) for n in mine)
            keep = self._keep_nodes(sku) * per_node[sku]
            keep_spot = self._keep_nodes(spot_lane(sku)) * per_node[sku]
            ctx = ScaleDownContext(
                now_s=int(now),
                sku_id=sku,
                idle=offered,
                pending_gpus=sum(p.request.num_gpu for p in mine_pending),
                free_gpus=capacity - in_use,
                capacity_gpus=capacity,
                forecast_gpus=None,
                demand_now_gpus=float(in_use),
                wait_price_usd_per_gpu_h=self._on_demand_usd(sku),
                fresh_nodes=fresh.get(sku, 0),
                unreachable_gang_gpus=unreachable_gang_gpus(mine_pending, out_of_reach),
                keep_free_gpus=keep,
                buffer_free_gpus=buffer_free_gpus(mine, sku, used) if keep else 0,
                keep_free_spot_gpus=keep_spot,
                spot_free_gpus=buffer_free_gpus(mine, sku, used, spot=True) if keep_spot else 0,
            )
            out.append(ctx)
        return tuple(out)

    def _step_buffer(
        self, obs: Observation, gpu_nodes: list[ObservedNode], per_node: dict[str, int], now: float
    ) -> None:
        """Hourly by the planner's clock (the first call at once): the start buffer's decision over the
        products (``per_node``: their GPUs per node) on the late starts of the pods of this planner's schedulers
        (:func:`late_starts`) and what a node of each costs on demand; with ``StartBuffer.spot``, a product with spot
        capacity (:func:`spot_capacity`) and a spot list price as two lanes (module docstring), its spot lane priced
        at spot. Kept in ``buffer_decisions``. The decision is the buffer's; this only reads and passes. ``now``: the
        planner's clock (the hour); the late starts are read against the observation's time (pods' timestamps)."""
        rule = self.buffer
        if rule is None or (self._buffer_at is not None and now - self._buffer_at < BUFFER_EVERY_S):
            return
        self._buffer_at = now
        ours = [p for p in obs.pods if p.scheduler_name in self.schedulers and not p.buffer]
        on = {n.name: n.sku for n in gpu_nodes}
        readings = {}
        window_s = rule.window_h * 3600
        for sku, per in sorted(per_node.items()):
            spot_usd = self._spot_usd(sku) if rule.spot else 0.0
            lanes = spot_usd > 0 and spot_capacity(sku, obs.node_pools, obs.nodes)
            lane = False if lanes else None  # the product's key reads the jobs that may not use spot, or all
            arrived, late = late_starts(ours, sku, obs.now_s, window_s, rule.within_s, on, may_use_spot=lane)
            # a product without a list price: priced at 1 USD per GPU-hour, so it ranks by its late jobs alone
            readings[sku] = LateReading(arrived, late, (self._on_demand_usd(sku) or 1.0) * per)
            if lanes:
                arrived, late = late_starts(ours, sku, obs.now_s, window_s, rule.within_s, on, may_use_spot=True)
                readings[spot_lane(sku)] = LateReading(arrived, late, spot_usd * per)
        self.buffer_decisions.update(rule.decide(readings))

    def _keep_nodes(self, key: str) -> int:
        """The nodes the start buffer last decided for ``key`` (a product or its spot lane; 0 without a buffer)."""
        decided = self.buffer_decisions.get(key) if self.buffer is not None else None
        return decided.nodes if decided is not None else 0

    def node_name(self, node_id: int) -> str:
        """The name of the node behind ``IdleNode.node_id`` of a context of this planner."""
        return self._names[node_id]

    def _tick(self, obs_now: float, steady_s: float | None) -> float:
        """The planner's clock for an observation at ``obs_now`` (the class docstring): never back."""
        now = obs_now
        if steady_s is not None:
            if self._clock is None:
                self._clock = (obs_now, steady_s)
            now = self._clock[0] + (steady_s - self._clock[1])
        if self._now is not None:
            now = max(now, self._now)
        self._now = now
        return now

    def _forget(self, observed: Collection[str], now: float) -> None:
        """Note the GPU nodes observed now; forget the ids and joins of nodes not observed for ``FORGET_AFTER_S``."""
        for name in observed:
            if name in self._ids:
                self._observed[name] = now
        for name in [k for k, at in self._observed.items() if now - at > FORGET_AFTER_S]:
            del self._observed[name]
            self._names.pop(self._ids.pop(name), None)
        if self._seen is not None:
            for name in [k for k, at in self._seen.items() if now - at > FORGET_AFTER_S]:
                del self._seen[name]

    def _fresh(self, gpu_nodes: list[ObservedNode], now: float) -> dict[str, int]:
        """Launched GPU nodes per product that joined since the last plan (none on the first)."""
        launched = {n.name: n.sku for n in gpu_nodes if n.capacity_type in LAUNCHED}
        first = self._seen is None
        seen = self._seen if self._seen is not None else {}
        counts: dict[str, int] = {}
        for name, sku in launched.items():
            if not first and name not in seen:
                counts[sku] = counts.get(sku, 0) + 1
            seen[name] = now
        self._seen = seen
        return counts

    def _idle(self, n: ObservedNode, now: float, obs_now: float) -> IdleNode:
        """``now``: the planner's clock, whose whole seconds the context's ``now_s`` and the idle time both count
        (the scaler follows a spell by ``now_s - idle_for_s``); ``obs_now``: the observation's, against the node's
        creation time."""
        since = self._idle_since[n.name]
        price, _ = node_price_usd_h(n, self.catalog, self.sku_map)
        up = obs_now - n.created_s if n.created_s is not None else now - since
        return IdleNode(self._id(n.name), n.node_pool or f"{n.sku}/{n.capacity_type}", n.sku,
                        LAUNCHED[n.capacity_type].value, n.spec.gpu_count, int(now) - since, int(max(up, 0.0)),
                        self.node_start_s, price)  # fmt: skip

    def _on_demand_usd(self, product: str) -> float:
        return self._list_usd(product, spot=False)

    def _spot_usd(self, product: str) -> float:
        return self._list_usd(product, spot=True)

    def _list_usd(self, product: str, *, spot: bool) -> float:
        """The product's on-demand (or spot) list price per GPU-hour (0: not in the catalog)."""
        sku = sku_for(product, self.catalog.sku_ids(), self.sku_map)
        lp = self.catalog.list_price(sku) if sku is not None else None
        return 0.0 if lp is None else float(lp.spot if spot else lp.on_demand)

    def _id(self, name: str) -> int:
        if name not in self._ids:
            self._ids[name] = self._next_id
            self._names[self._next_id] = name
            self._next_id += 1
            self._observed[name] = self._now if self._now is not None else 0.0
        return self._ids[name]
