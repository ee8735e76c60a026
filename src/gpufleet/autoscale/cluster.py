"""Cluster autoscaler: which GPU nodes to launch and which to terminate, as data with reasons.

Interface (pluggable into any world, simulated or real):

    autoscaler = ClusterAutoscaler(ClusterAutoscalerConfig(...))
    decisions = autoscaler.decide(snapshot, now_s)     # ClusterSnapshot -> ClusterDecisions

The snapshot is plain data (node groups, nodes, pending work, optional GPU-demand forecasts); the caller
applies the decisions (launch ``count`` nodes in a group, terminate a node after draining it). The only
state kept between calls is when each node was first seen unneeded and the recent terminations (for the
disruption budget), exactly what the Kubernetes Cluster Autoscaler keeps.

Provisioning walks the fallback chain: reserved -> on_demand -> spot (checkpointable training only, never
serving) -> secondary, cheapest group first within a tier. A gang is provisioned all or nothing, from one
group: either that group's free GPUs plus new nodes (within quota) hold every member, or nothing is launched
for it and the next group is tried; if none can, the gang is reported infeasible.

Scale-down: a ready node whose allocated GPU share stays below ``scale_down_utilization`` for
``scale_down_unneeded_s`` is a candidate if its pods fit on the other nodes. gpufleet then keeps it when
(a) it is still inside its minimum billing period (terminating saves nothing yet), or (b) the forecast says
its SKU will need the GPUs again before a relaunch would pay off (``node_start_s + min_billing_s``).
At most ``disruption_budget_nodes`` terminations happen per ``disruption_window_s``. Optional warm
headroom keeps free GPUs per SKU ready for bursts.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.domain.pools import TIER_RANK, Tier


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """Nodes of one SKU bought in one pool. ``max_nodes`` is the quota (None = unbounded)."""

    id: str
    sku_id: str
    tier: Tier
    gpus_per_node: int
    price_usd_per_gpu_h: float
    node_start_s: float = 600.0
    min_billing_s: float = 3_600.0
    max_nodes: int | None = None
    available: bool = True  # False while the pool is stocked out


@dataclass(frozen=True, slots=True)
class Node:
    """A node as the autoscaler sees it. ``pod_gpus`` are the GPU requests of the pods bound to it."""

    id: str
    group_id: str
    gpus: int
    pod_gpus: tuple[int, ...] = ()
    ready: bool = True
    launched_s: float = 0.0
    disruptable: bool = True  # False: a pod there may not be evicted (disruption budget of a workload)

    @property
    def gpus_used(self) -> int:
        return sum(self.pod_gpus)


@dataclass(frozen=True, slots=True)
class PendingWork:
    """Work waiting for GPUs: ``members`` pods of ``gpus_per_member`` each (members > 1 = a gang)."""

    id: str
    gpus_per_member: int
    members: int = 1
    acceptable_skus: tuple[str, ...] = ()  # empty = any SKU
    serving: bool = False
    checkpointable: bool = False
    priority: int = 1
    pending_since_s: float = 0.0


@dataclass(frozen=True, slots=True)
class DemandCeiling:
    """One upper quantile of a :class:`gpufleet.ports.DemandForecast` of GPUs in use for one SKU, laid on
    absolute times ``t_s`` (the caller picks the level and converts; see ``autoscale/loop_adapters.py``)."""

    sku_id: str
    t_s: npt.NDArray[np.float64]
    gpus: npt.NDArray[np.float64]

    def peak_between(self, start_s: float, end_s: float) -> float:
        m = (self.t_s >= start_s) & (self.t_s <= end_s)
        return float(self.gpus[m].max()) if m.any() else 0.0


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    groups: tuple[NodeGroup, ...]
    nodes: tuple[Node, ...]
    pending: tuple[PendingWork, ...] = ()
    forecasts: tuple[DemandCeiling, ...] = ()


@dataclass(frozen=True, slots=True)
class Launch:
    group_id: str
    count: int
    work_ids: tuple[str, ...]
    reason: str  # "pending_work" | "gang_all_or_nothing" | "warm_headroom"


@dataclass(frozen=True, slots=True)
class Terminate:
    node_id: str
    reason: str  # "unneeded_below_threshold"


@dataclass(frozen=True, slots=True)
class Hold:
    node_id: str
    reason: str  # "within_min_billing" | "forecast_needed_before_payoff" | "disruption_budget" | "takes_pods_of_removed_node" | ...


@dataclass(frozen=True, slots=True)
class InfeasibleWork:
    work_id: str
    reason: str  # "no_group_fits_gang" | "no_eligible_group"


@dataclass(frozen=True, slots=True)
class ClusterDecisions:
    launches: tuple[Launch, ...] = ()
    terminations: tuple[Terminate, ...] = ()
    holds: tuple[Hold, ...] = ()
    infeasible: tuple[InfeasibleWork, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterAutoscalerConfig:
    """Settings (units in names).

    scale_down_unneeded_s / scale_down_utilization: the Cluster Autoscaler's pair (10 min, 50%).
    use_forecast: keep nodes the forecast needs before a relaunch pays off (gpufleet) or not (CA-like).
    respect_min_billing: keep nodes still inside their minimum billing period (gpufleet) or not.
    disruption_budget_nodes / disruption_window_s: at most this many terminations per window.
    warm_headroom_gpus: free GPUs to keep ready per SKU (optional).
    """

    scale_down_unneeded_s: float = 600.0
    scale_down_utilization: float = 0.5
    use_forecast: bool = True
    respect_min_billing: bool = True
    disruption_budget_nodes: int = 10
    disruption_window_s: float = 600.0
    warm_headroom_gpus: dict[str, int] = field(default_factory=dict)


def cluster_autoscaler_like() -> ClusterAutoscalerConfig:
    """The baseline: Kubernetes Cluster Autoscaler defaults (10 min unneeded, 50% threshold), no forecast."""
    return ClusterAutoscalerConfig(use_forecast=False, respect_min_billing=False, disruption_budget_nodes=10)


def eligible(group: NodeGroup, work: PendingWork) -> bool:
    """Spot carries only checkpointable training; a member must fit on one node of an acceptable SKU."""
    if not group.available or work.gpus_per_member > group.gpus_per_node:
        return False
    if work.acceptable_skus and group.sku_id not in work.acceptable_skus:
        return False
    return not (group.tier is Tier.SPOT and (work.serving or not work.checkpointable))


def _fit_members(free: list[int], members: int, size: int) -> tuple[int, list[int]]:
    """Place up to ``members`` pods of ``size`` GPUs first-fit onto ``free`` slots; returns placed, new free."""
    out = list(free)
    placed = 0
    for i in range(len(out)):
        while placed < members and out[i] >= size:
            out[i] -= size
            placed += 1
    return placed, out


class ClusterAutoscaler:
    """``decide(snapshot, now_s) -> ClusterDecisions``; see the module docstring for the rules."""

    def __init__(self, config: ClusterAutoscalerConfig | None = None) -> None:
        self.config = config or ClusterAutoscalerConfig()
        self._unneeded_since: dict[str, float] = {}
        self._terminated: deque[float] = deque()

    def decide(self, snapshot: ClusterSnapshot, now_s: float) -> ClusterDecisions:
        groups = {g.id: g for g in snapshot.groups}
        free = {n.id: n.gpus - n.gpus_used for n in snapshot.nodes}
        before = dict(free)
        launches, infeasible, planned = self._provision(snapshot, groups, free)
        launches += self._headroom(snapshot, groups, free, planned)
        wanted = {nid for nid, f in free.items() if f < before[nid]}  # pending work will land there
        terms, holds = self._scale_down(snapshot, groups, now_s, wanted, free)
        return ClusterDecisions(tuple(launches), tuple(terms), tuple(holds), tuple(infeasible))

    # -- scale up ------------------------------------------------------------------------------------
    def _chain(self, groups: dict[str, NodeGroup], work: PendingWork) -> list[NodeGroup]:
        cands = [g for g in groups.values() if eligible(g, work)]
        return sorted(cands, key=lambda g: (TIER_RANK[g.tier], g.price_usd_per_gpu_h, g.id))

    def _provision(
        self, snap: ClusterSnapshot, groups: dict[str, NodeGroup], free: dict[str, int]
    ) -> tuple[list[Launch], list[InfeasibleWork], dict[str, int]]:
        count = {g: 0 for g in groups}
        for n in snap.nodes:
            count[n.group_id] = count.get(n.group_id, 0) + 1
        planned = {g: 0 for g in groups}  # new nodes per group in this decision
        planned_free: dict[str, list[int]] = {g: [] for g in groups}  # free GPUs on planned nodes
        nodes_by_group: dict[str, list[str]] = {}
        for n in snap.nodes:
            nodes_by_group.setdefault(n.group_id, []).append(n.id)
        launches: list[Launch] = []
        infeasible: list[InfeasibleWork] = []
        order = sorted(snap.pending, key=lambda w: (-w.priority, w.pending_since_s, w.id))
        for w in order:
            chain = self._chain(groups, w)
            if not chain:
                infeasible.append(InfeasibleWork(w.id, "no_eligible_group"))
                continue
            done = False
            for g in chain:
                ids = nodes_by_group.get(g.id, [])
                slots = [free[i] for i in ids] + planned_free[g.id]
                placed, after = _fit_members(slots, w.members, w.gpus_per_member)
                rest = w.members - placed
                per_node = g.gpus_per_node // w.gpus_per_member
                need = math.ceil(rest / per_node) if rest > 0 else 0
                quota = math.inf if g.max_nodes is None else g.max_nodes - count.get(g.id, 0) - planned[g.id]
                if need > quota:
                    continue  # all or nothing: this group cannot hold the whole gang
                for i, nid in enumerate(ids):
                    free[nid] = after[i]
                planned_free[g.id] = after[len(ids) :]
                if need:
                    new_free = [g.gpus_per_node] * need
                    _, new_free = _fit_members(new_free, rest, w.gpus_per_member)
                    planned_free[g.id] += new_free
                    planned[g.id] += need
                    why = "gang_all_or_nothing" if w.members > 1 else "pending_work"
                    launches.append(Launch(g.id, need, (w.id,), why))
                done = True
                break
            if not done:
                infeasible.append(InfeasibleWork(w.id, "no_group_fits_gang" if w.members > 1 else "no_capacity"))
        return launches, infeasible, {g: sum(v) for g, v in planned_free.items()}

    def _headroom(
        self, snap: ClusterSnapshot, groups: dict[str, NodeGroup], free: dict[str, int], planned: dict[str, int]
    ) -> list[Launch]:
        out: list[Launch] = []
        for sku_id, want in sorted(self.config.warm_headroom_gpus.items()):
            have = sum(free[n.id] for n in snap.nodes if groups[n.group_id].sku_id == sku_id)
            have += sum(v for g, v in planned.items() if groups[g].sku_id == sku_id)
            if have >= want:
                continue
            probe = PendingWork(f"headroom:{sku_id}", 1, acceptable_skus=(sku_id,), serving=True)
            chain = self._chain(groups, probe)
            if chain:
                g = chain[0]
                n_new = math.ceil((want - have) / g.gpus_per_node)
                if g.max_nodes is not None:
                    n_new = min(n_new, g.max_nodes - sum(1 for n in snap.nodes if n.group_id == g.id))
                if n_new > 0:
                    out.append(Launch(g.id, n_new, (), "warm_headroom"))
        return out

    # -- scale down ----------------------------------------------------------------------------------
    def _scale_down(
        self,
        snap: ClusterSnapshot,
        groups: dict[str, NodeGroup],
        now_s: float,
        wanted: set[str],
        free_after: dict[str, int],
    ) -> tuple[list[Terminate], list[Hold]]:
        """Candidates' pods must fit in the GPUs left free after this decision's pending placements."""
        c = self.config
        seen = {n.id for n in snap.nodes}
        for nid in list(self._unneeded_since):
            if nid not in seen:
                del self._unneeded_since[nid]
        while self._terminated and self._terminated[0] <= now_s - c.disruption_window_s:
            self._terminated.popleft()
        cands: list[Node] = []
        for n in snap.nodes:
            util = n.gpus_used / n.gpus if n.gpus else 1.0
            if not n.ready or util >= c.scale_down_utilization:
                self._unneeded_since.pop(n.id, None)
                continue
            since = self._unneeded_since.setdefault(n.id, now_s)
            if now_s - since >= c.scale_down_unneeded_s:
                cands.append(n)
        cands.sort(key=lambda n: (n.gpus_used, n.launched_s, n.id))
        terms: list[Terminate] = []
        holds: list[Hold] = []
        removed: set[str] = set()
        receiving: set[str] = set()  # nodes this decision moves pods of terminated nodes onto
        free = dict(free_after)
        cap_by_sku: dict[str, int] = {}
        for n in snap.nodes:
            sku_id = groups[n.group_id].sku_id
            cap_by_sku[sku_id] = cap_by_sku.get(sku_id, 0) + n.gpus
        fc = {f.sku_id: f for f in snap.forecasts}
        peaks: dict[tuple[str, float], float] = {}
        headroom = c.warm_headroom_gpus
        for n in cands:
            g = groups[n.group_id]
            if not n.disruptable:
                holds.append(Hold(n.id, "not_disruptable"))
                continue
            if n.id in wanted:
                holds.append(Hold(n.id, "needed_by_pending_work"))
                continue
            if n.id in receiving:  # its own pods are not all it holds any more
                holds.append(Hold(n.id, "takes_pods_of_removed_node"))
                continue
            if c.respect_min_billing and now_s - n.launched_s < g.min_billing_s:
                holds.append(Hold(n.id, "within_min_billing"))
                continue
            if c.use_forecast and g.sku_id in fc:
                horizon = g.node_start_s + g.min_billing_s
                need = peaks.get((g.sku_id, horizon))
                if need is None:  # one look-up per SKU and horizon, not per candidate
                    need = peaks[(g.sku_id, horizon)] = fc[g.sku_id].peak_between(now_s, now_s + horizon)
                if need > cap_by_sku[g.sku_id] - n.gpus:
                    holds.append(Hold(n.id, "forecast_needed_before_payoff"))
                    continue
            others: list[str] = []
            slots: list[int] = []
            if n.pod_gpus or headroom.get(g.sku_id, 0) > 0:  # an empty node needs no room elsewhere
                others = [
                    m.id
                    for m in snap.nodes
                    if m.id != n.id and m.id not in removed and m.ready and groups[m.group_id].sku_id == g.sku_id
                ]
                slots = [free[i] for i in others]
                ok = True
                for size in sorted(n.pod_gpus, reverse=True):
                    j = next((k for k, s in enumerate(slots) if s >= size), None)
                    if j is None:
                        ok = False
                        break
                    slots[j] -= size
                if not ok:
                    holds.append(Hold(n.id, "pods_do_not_fit_elsewhere"))
                    continue
                if headroom.get(g.sku_id, 0) > sum(slots):
                    holds.append(Hold(n.id, "warm_headroom"))
                    continue
            if len(self._terminated) >= c.disruption_budget_nodes:
                holds.append(Hold(n.id, "disruption_budget"))
                continue
            for i, s in zip(others, slots, strict=True):
                if s < free[i]:
                    receiving.add(i)
                free[i] = s
            removed.add(n.id)
            cap_by_sku[g.sku_id] -= n.gpus
            self._terminated.append(now_s)
            self._unneeded_since.pop(n.id, None)
            terms.append(Terminate(n.id, "unneeded_below_threshold"))
        return terms, holds
