"""The simulated fleet: capacity pools, nodes and their exact cost accounting.

Nodes live in parallel Python lists (fast scalar access in the event loop). Each pool integrates, exactly and
in integer GPU-seconds, the GPUs it bills (``paid``) and the GPUs allocated to work (``alloc``); cost is price x
integral in ledger units. ``alloc <= paid`` at every instant because work only runs on billed nodes, so
``idle = paid - alloc >= 0`` and allocated + idle == fleet cost by construction; the world checks it against
an independent per-segment ledger.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.control.scheduling import FreeGpuIndex
from gpufleet.domain.pools import TIER_RANK, CapacityPool, Tier
from gpufleet.sim.lifecycle import NodeState, node_gate

NODES_PER_RACK = 4  # 8-GPU nodes per rack (a common power budget for HGX-class servers)
RACK_ID_STRIDE = 1_000_000  # rack ids are unique across pools
_UP = int(NodeState.UP)


@dataclass(slots=True)
class PoolRuntime:
    """Mutable state of one pool in the simulation."""

    pool: CapacityPool
    sku_idx: int
    tier_rank: int
    price_uusd: int
    capacity_gpus: int | None  # quota (on-demand) or provider ceiling (spot, secondary); None = unbounded
    in_stock: bool = True
    tier_name: str = ""
    paid_gpus: int = 0
    alloc_gpus: int = 0
    last_t: int = 0
    paid_gpu_s: int = 0
    alloc_gpu_s: int = 0
    launched: int = 0
    terminated: int = 0

    price_usd: float = 0.0  # the pool's price per GPU-hour as a float (what the node scaler reads)

    def __post_init__(self) -> None:
        self.tier_name = self.pool.tier.value
        self.price_usd = float(self.pool.price_usd_per_gpu_h)

    def touch(self, now_s: int) -> None:
        dt = now_s - self.last_t
        if dt:
            self.paid_gpu_s += self.paid_gpus * dt
            self.alloc_gpu_s += self.alloc_gpus * dt
            self.last_t = now_s

    @property
    def headroom_gpus(self) -> int | None:
        return None if self.capacity_gpus is None else self.capacity_gpus - self.paid_gpus


@dataclass(slots=True)
class Fleet:
    sku_ids: list[str]
    gpus_per_node: list[int]  # per SKU index
    pools: list[PoolRuntime] = field(default_factory=list)
    # node columns
    n_sku: list[int] = field(default_factory=list)
    n_pool: list[int] = field(default_factory=list)
    n_total: list[int] = field(default_factory=list)
    n_free: list[int] = field(default_factory=list)
    n_state: list[int] = field(default_factory=list)
    n_epoch: list[int] = field(default_factory=list)
    n_pods: list[list[int]] = field(default_factory=list)
    n_idle_since: list[int] = field(default_factory=list)
    n_up_since: list[int] = field(default_factory=list)
    n_res: list[int] = field(default_factory=list)  # reservation index for reserved nodes, else -1
    n_ordinal: list[int] = field(default_factory=list)  # launch order within its first pool (node identity)
    n_lives: list[int] = field(default_factory=list)  # times the node came alive (up or repaired)
    n_change: list[int] = field(default_factory=list)  # bumped whenever the node's pods change (cache key)
    n_rack: list[int] = field(default_factory=list)  # topology: racks of NODES_PER_RACK nodes in launch order
    # what stopping work on the node saves per GPU-hour: 0.0 on a reserved node (paid whether used or not), else
    # its pool's price (``replica_victims.saving_usd_h`` of the node; kept with n_pool and n_res)
    n_saving: list[float] = field(default_factory=list)
    changed: set[int] = field(default_factory=set)  # nodes whose pods changed since a reader last cleared it
    index: FreeGpuIndex = field(init=False)

    def __post_init__(self) -> None:
        self.index = FreeGpuIndex(len(self.sku_ids), len(TIER_RANK), max(self.gpus_per_node))
        self.index.track_racks(self.n_rack, self.gpus_per_node)  # gangs read whole free nodes per rack

    def add_pool(self, pool: CapacityPool, capacity_gpus: int | None) -> int:
        self.pools.append(
            PoolRuntime(
                pool, self.sku_ids.index(pool.sku_id), TIER_RANK[pool.tier], pool.price_uusd_per_gpu_h, capacity_gpus
            )
        )
        return len(self.pools) - 1

    def pool_of(self, sku_idx: int, tier: Tier) -> int:
        for i, p in enumerate(self.pools):
            if p.sku_idx == sku_idx and p.pool.tier is tier:
                return i
        return -1

    # --- node lifecycle -------------------------------------------------------------------------------
    def launch(self, pool_idx: int, now_s: int, *, up: bool, reservation: int = -1) -> int:
        """Create a billed node in a pool (UP at once for reserved capacity, else PROVISIONING)."""
        pr = self.pools[pool_idx]
        g = self.gpus_per_node[pr.sku_idx]
        node = len(self.n_sku)
        self.n_sku.append(pr.sku_idx)
        self.n_pool.append(pool_idx)
        self.n_total.append(g)
        self.n_free.append(g)
        self.n_state.append(NodeState.UP if up else NodeState.PROVISIONING)
        self.n_epoch.append(0)
        self.n_pods.append([])
        self.n_idle_since.append(now_s)
        self.n_up_since.append(now_s)
        self.n_res.append(reservation)
        self.n_saving.append(0.0 if reservation >= 0 else pr.price_usd)
        self.n_ordinal.append(pr.launched)
        self.n_lives.append(0)
        self.n_change.append(0)
        self.n_rack.append(pool_idx * RACK_ID_STRIDE + pr.launched // NODES_PER_RACK)
        if reservation < 0:  # reserved capacity is billed per reservation, not per node
            pr.touch(now_s)
            pr.paid_gpus += g
        pr.launched += 1
        if up:
            self.index.add(node, pr.sku_idx, pr.tier_rank, g)
        return node

    def node_up(self, node: int, now_s: int) -> None:
        node_gate(node, self.n_state[node], NodeState.UP)
        self.n_state[node] = NodeState.UP
        self.n_idle_since[node] = now_s
        self.n_up_since[node] = now_s
        pr = self.pools[self.n_pool[node]]
        self.index.add(node, pr.sku_idx, pr.tier_rank, self.n_free[node])

    def node_down(self, node: int) -> None:
        """Take a node out of scheduling (failure). Its pods must already be released."""
        pr = self.pools[self.n_pool[node]]
        node_gate(node, self.n_state[node], NodeState.DOWN)
        if self.n_state[node] == NodeState.UP:
            self.index.remove(node, pr.sku_idx, pr.tier_rank, self.n_free[node])
        self.n_state[node] = NodeState.DOWN
        self.n_epoch[node] += 1

    def terminate(self, node: int, now_s: int) -> None:
        """Stop billing a node and remove it. Its pods must already be released."""
        pr = self.pools[self.n_pool[node]]
        node_gate(node, self.n_state[node], NodeState.GONE)
        if self.n_state[node] == NodeState.UP:
            self.index.remove(node, pr.sku_idx, pr.tier_rank, self.n_free[node])
        self.n_state[node] = NodeState.GONE
        self.n_epoch[node] += 1
        if self.n_res[node] < 0:
            pr.touch(now_s)
            pr.paid_gpus -= self.n_total[node]
        pr.terminated += 1

    def move_to_pool(self, node: int, pool_idx: int, now_s: int) -> None:
        """Re-bill a node under another pool (a reservation expired: the instance now bills on demand)."""
        old = self.pools[self.n_pool[node]]
        new = self.pools[pool_idx]
        used = self.n_total[node] - self.n_free[node]
        old.touch(now_s)
        new.touch(now_s)
        old.alloc_gpus -= used
        new.alloc_gpus += used
        new.paid_gpus += self.n_total[node]
        if self.n_state[node] == NodeState.UP:
            self.index.remove(node, old.sku_idx, old.tier_rank, self.n_free[node])
            self.index.add(node, new.sku_idx, new.tier_rank, self.n_free[node])
        self.n_pool[node] = pool_idx
        self.n_res[node] = -1
        self.n_saving[node] = new.price_usd

    # --- allocation -------------------------------------------------------------------------------
    def allocate(self, node: int, pod: int, gpus: int, now_s: int) -> None:
        free = self.n_free[node]
        if gpus > free:
            raise AssertionError(f"node {node} over capacity: {gpus} > {free} free")
        pr = self.pools[self.n_pool[node]]
        dt = now_s - pr.last_t  # PoolRuntime.touch, inlined (the event loop's hottest path)
        if dt:
            pr.paid_gpu_s += pr.paid_gpus * dt
            pr.alloc_gpu_s += pr.alloc_gpus * dt
            pr.last_t = now_s
        pr.alloc_gpus += gpus
        self.n_free[node] = free - gpus
        self.index.move(node, pr.sku_idx, pr.tier_rank, free, free - gpus)
        self.n_pods[node].append(pod)
        self.n_change[node] += 1
        self.changed.add(node)

    def release(self, node: int, pod: int, gpus: int, now_s: int) -> None:
        pr = self.pools[self.n_pool[node]]
        dt = now_s - pr.last_t  # PoolRuntime.touch, inlined
        if dt:
            pr.paid_gpu_s += pr.paid_gpus * dt
            pr.alloc_gpu_s += pr.alloc_gpus * dt
            pr.last_t = now_s
        pr.alloc_gpus -= gpus
        free = self.n_free[node]
        self.n_free[node] = free + gpus
        if self.n_state[node] == _UP:
            self.index.move(node, pr.sku_idx, pr.tier_rank, free, free + gpus)
        self.n_pods[node].remove(pod)
        self.n_change[node] += 1
        self.changed.add(node)
        if free + gpus == self.n_total[node]:
            self.n_idle_since[node] = now_s
