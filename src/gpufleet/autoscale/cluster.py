"""Scale-down rules of gpufleet's node scaler: which idle launched nodes to terminate, as data with reasons.

These rules sit behind the one node-scaler interface, :class:`gpufleet.ports.NodeScaler`
(:class:`gpufleet.autoscale.nodes_payoff.PayoffAwareNodes` runs them; scale-up is the port's ``nodes_to_launch``,
and the placer picks the pool). They read a snapshot (node groups, nodes, optional GPU-demand forecasts) and keep
only what the Kubernetes Cluster Autoscaler keeps between calls: when each node was first seen unneeded and the
recent terminations (for the disruption budget).

A ready node whose allocated GPU share stays below ``scale_down_utilization`` for ``scale_down_unneeded_s`` is a
candidate if its pods fit on the other nodes. gpufleet then keeps it when (a) it is still inside its minimum
billing period (terminating saves nothing yet), or (b) the forecast says its SKU will need the GPUs again before a
relaunch would pay off (``node_start_s + min_billing_s``). At most ``disruption_budget_nodes`` terminations happen
per ``disruption_window_s``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain.pools import Tier


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
    forecasts: tuple[DemandCeiling, ...] = ()


@dataclass(frozen=True, slots=True)
class Terminate:
    node_id: str
    reason: str  # "unneeded_below_threshold"


@dataclass(frozen=True, slots=True)
class Hold:
    node_id: str
    reason: str  # "within_min_billing" | "forecast_needed_before_payoff" | "disruption_budget" | "takes_pods_of_removed_node" | ...


@dataclass(frozen=True, slots=True)
class ScaleDownDecisions:
    terminations: tuple[Terminate, ...] = ()
    holds: tuple[Hold, ...] = ()


@dataclass(frozen=True, slots=True)
class ScaleDownConfig:
    """Settings (units in names).

    scale_down_unneeded_s / scale_down_utilization: the Cluster Autoscaler's pair (10 min, 50%).
    use_forecast: keep nodes the forecast needs before a relaunch pays off (gpufleet) or not (CA-like).
    respect_min_billing: keep nodes still inside their minimum billing period (gpufleet) or not.
    disruption_budget_nodes / disruption_window_s: at most this many terminations per window.
    """

    scale_down_unneeded_s: float = 600.0
    scale_down_utilization: float = 0.5
    use_forecast: bool = True
    respect_min_billing: bool = True
    disruption_budget_nodes: int = 10
    disruption_window_s: float = 600.0


def cluster_autoscaler_like() -> ScaleDownConfig:
    """The baseline: Kubernetes Cluster Autoscaler defaults (10 min unneeded, 50% threshold), no forecast."""
    return ScaleDownConfig(use_forecast=False, respect_min_billing=False, disruption_budget_nodes=10)


class ScaleDownRules:
    """``decide(snapshot, now_s) -> ScaleDownDecisions``; see the module docstring for the rules."""

    def __init__(self, config: ScaleDownConfig | None = None) -> None:
        self.config = config or ScaleDownConfig()
        self._unneeded_since: dict[str, float] = {}
        self._terminated: deque[float] = deque()

    def decide(self, snapshot: ClusterSnapshot, now_s: float) -> ScaleDownDecisions:
        groups = {g.id: g for g in snapshot.groups}
        free = {n.id: n.gpus - n.gpus_used for n in snapshot.nodes}
        terms, holds = self._scale_down(snapshot, groups, now_s, free)
        return ScaleDownDecisions(tuple(terms), tuple(holds))

    # -- scale down ----------------------------------------------------------------------------------
    def _scale_down(
        self,
        snap: ClusterSnapshot,
        groups: dict[str, NodeGroup],
        now_s: float,
        free_after: dict[str, int],
    ) -> tuple[list[Terminate], list[Hold]]:
        """Candidates' pods must fit in the free GPUs of the other ready nodes of their SKU."""
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
        for n in cands:
            g = groups[n.group_id]
            if not n.disruptable:
                holds.append(Hold(n.id, "not_disruptable"))
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
            if n.pod_gpus:  # an empty node needs no room elsewhere
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
