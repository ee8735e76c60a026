"""Which idle launched GPU nodes of a Kubernetes cluster to release: the loop's node scaler on an observation.

The simulator's gpufleet loop scales nodes down with its node scaler (``ControlLoop.gpufleet(...).node_scaler``,
:class:`~gpufleet.autoscale.nodes_payoff.PayoffAwareNodes`: nothing goes while work of the SKU is pending, an idle
node is held while the rent-or-buy rule says a relaunch would cost more, capped by the SKU's recent need for fresh
nodes). In a cluster where Karpenter launches the nodes, :class:`NodeReleasePlanner` asks that same scaler through
``ports.NodeScaler.scale_down``, one :class:`~gpufleet.ports.ScaleDownContext` per GPU product, built from an
:class:`~gpufleet.control.observation.Observation`:

- idle nodes: Ready, uncordoned GPU nodes of a launched capacity type (``on-demand``, ``spot``; ``reserved`` is paid
  whether used or not) with no active pod bound, idle at least the scaler's ``min_idle_s`` by this planner's
  watch (a node first seen idle counts from then), priced at the catalog's price of its product and capacity type;
- pending work: GPU pods not bound, of a scheduler that places pods on these nodes (``schedulers``: the
  controller's and the default scheduler; a pod of a scheduler nobody runs would hold every node forever), that
  may run on the product (no GPU model asked, or this one);
- the wait a relaunch causes is priced at the product's on-demand price, as in the simulator;
- ``fresh_nodes``: launched nodes of the product that joined since the last plan (Karpenter's launches for
  pending work), the need the scaler's hold cap counts; the first observation counts none.

Node start (``node_start_s``) is one setting for the cluster, the controller's (the simulator reads it per pool).
Decisions are data (:class:`NodeRelease`, with the scaler's reason code); the controller cordons, checks that the
node is still empty and deletes it (``adapters/kubernetes/controller.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.control.observation import Observation, ObservedNode
from gpufleet.control.replica_victims import node_price_usd_h
from gpufleet.domain.catalog import sku_for
from gpufleet.domain.pools import Tier
from gpufleet.ports import IdleNode, NodeScaler, PriceCatalog, ScaleDownContext

LAUNCHED = {"on-demand": Tier.ON_DEMAND, "spot": Tier.SPOT}


@dataclass(frozen=True, slots=True)
class NodeRelease:
    """An idle launched node to release, with the node scaler's reason code."""

    node: str
    sku: str  # GPU product
    reason: str
    idle_for_s: int


@dataclass(slots=True)
class NodeReleasePlanner:
    """The loop's node scaler asked on observations (module docstring). Keeps, across plans, when each node was
    first seen idle, a stable id per node name (the scaler follows idle spells by id) and the nodes already seen."""

    scaler: NodeScaler
    catalog: PriceCatalog
    node_start_s: int = 600
    sku_map: dict[str, str] = field(default_factory=dict)  # GPU product -> catalog SKU where names do not say
    schedulers: frozenset[str] = frozenset({"gpufleet", "default-scheduler"})  # whose pending pods hold nodes
    _idle_since: dict[str, float] = field(default_factory=dict)
    _ids: dict[str, int] = field(default_factory=dict)
    _names: list[str] = field(default_factory=list)
    _seen: set[str] | None = None

    def plan(self, obs: Observation) -> tuple[NodeRelease, ...]:
        now = obs.now_s
        busy = {p.node for p in obs.pods if p.node and p.active}
        gpu_nodes = [n for n in obs.nodes if n.sku and n.spec.gpu_count > 0]
        fresh = self._fresh(gpu_nodes)
        for n in gpu_nodes:
            if n.name in busy or not n.schedulable:
                self._idle_since.pop(n.name, None)
            else:
                self._idle_since.setdefault(n.name, now)
        names = {n.name for n in gpu_nodes}
        for gone in [k for k in self._idle_since if k not in names]:
            del self._idle_since[gone]
        pending = [
            p
            for p in obs.pods
            if not p.node and p.active and not p.gated and p.request.num_gpu > 0 and p.scheduler_name in self.schedulers
        ]
        used: dict[str, int] = {}
        for p in obs.pods:
            if p.node and p.active:  # a GPU share holds its GPU
                used[p.node] = used.get(p.node, 0) + p.request.num_gpu
        out: list[NodeRelease] = []
        for sku in sorted({n.sku for n in gpu_nodes}):
            mine = [n for n in gpu_nodes if n.sku == sku and n.schedulable]
            idle = [self._idle(n, now) for n in mine if n.capacity_type in LAUNCHED and n.name in self._idle_since]
            offered = [i for i in idle if i.idle_for_s >= self.scaler.min_idle_s]
            capacity = sum(n.spec.gpu_count for n in mine)
            in_use = sum(min(used.get(n.name, 0), n.spec.gpu_count) for n in mine)
            ctx = ScaleDownContext(
                now_s=int(now),
                sku_id=sku,
                idle=offered,
                pending_gpus=sum(p.request.num_gpu for p in pending if self._may_run(p.request.gpu_models, sku)),
                free_gpus=capacity - in_use,
                capacity_gpus=capacity,
                forecast_gpus=None,
                demand_now_gpus=float(in_use),
                wait_price_usd_per_gpu_h=self._on_demand_usd(sku),
                fresh_nodes=fresh.get(sku, 0),
            )
            names_by_id = {i.node_id: i for i in offered}
            for node_id, reason in self.scaler.scale_down(ctx):
                i = names_by_id.get(node_id)
                if i is not None:
                    out.append(NodeRelease(self._names[node_id], sku, reason, i.idle_for_s))
        return tuple(out)

    def _fresh(self, gpu_nodes: list[ObservedNode]) -> dict[str, int]:
        """Launched GPU nodes per product that joined since the last plan (none on the first)."""
        launched = {n.name: n.sku for n in gpu_nodes if n.capacity_type in LAUNCHED}
        seen, self._seen = self._seen, set(launched) | (self._seen or set())
        counts: dict[str, int] = {}
        if seen is not None:
            for name, sku in launched.items():
                if name not in seen:
                    counts[sku] = counts.get(sku, 0) + 1
        return counts

    def _idle(self, n: ObservedNode, now: float) -> IdleNode:
        since = self._idle_since[n.name]
        price, _ = node_price_usd_h(n, self.catalog, self.sku_map)
        up = now - n.created_s if n.created_s is not None else now - since
        return IdleNode(self._id(n.name), n.node_pool or f"{n.sku}/{n.capacity_type}", n.sku,
                        LAUNCHED[n.capacity_type].value, n.spec.gpu_count, int(now - since), int(max(up, 0.0)),
                        self.node_start_s, price)  # fmt: skip

    def _on_demand_usd(self, product: str) -> float:
        sku = sku_for(product, self.catalog.sku_ids(), self.sku_map)
        lp = self.catalog.list_price(sku) if sku is not None else None
        return float(lp.on_demand) if lp is not None else 0.0

    @staticmethod
    def _may_run(models: tuple[str, ...], sku: str) -> bool:
        return not models or sku in models

    def _id(self, name: str) -> int:
        if name not in self._ids:
            self._ids[name] = len(self._names)
            self._names.append(name)
        return self._ids[name]
