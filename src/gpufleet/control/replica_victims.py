"""Which replica of a serving fleet to stop when the fleet scales down: a pure decision with a reason code.

Kubernetes' ReplicaSet controller, asked to remove replicas, stops a replica that is not ready yet first, then the
newest (``controller.ReplicaSetController``'s default ranking, without a ``pod-deletion-cost``): that order costs
nothing to compute and ignores what each replica's node costs. :func:`newest_first` is that rule; the baseline
and common-practice loops keep it, so their figures do not move.

gpufleet's rule, :func:`dearest_first`, stops a replica that is not ready yet first too (it serves nothing, and
stopping it loses no warm replica), then the ready replica whose removal saves the most: the one on the dearest
node per GPU-hour. A node held under a reservation is paid whether used or not, so a replica there saves nothing
(price 0); on-demand ($6.88/GPU-h for an H100) goes before secondary ($2.95) before reserved. Among equally dear
replicas the one alone on its node(s) goes first, so the node empties and the node scaler can stop it; then the
newest (Kubernetes' own tie-break). Placement takes the cheapest running room first
(control/placement.running_tier_order): together the two keep serving on the cheap room and let the dear
on-demand nodes empty.

The world describes each replica as a :class:`ReplicaView` (oldest first, the fleet's order) and applies the
choice; it never decides. In Kubernetes the same choice is expressed by the
``controller.kubernetes.io/pod-deletion-cost`` annotation (the ReplicaSet controller deletes a not-ready pod
first, then the lowest cost): :func:`deletion_costs` gives each replica its cost in the rule's order, and
:func:`deletion_cost_plan` turns an observed cluster into the annotations to write before a Deployment scales
down (the Kubernetes controller applies them, adapters/kubernetes/controller.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.domain.catalog import sku_for
from gpufleet.ports import PriceCatalog

# reason codes
NOT_READY = "victim_not_ready"  # a replica still starting (or waiting for a node): the newest such
NEWEST = "victim_newest"  # Kubernetes' default: the newest ready replica
DEAREST_EMPTIES_NODE = "victim_dearest_empties_node"  # on the dearest node per GPU-hour, alone there
DEAREST = "victim_dearest"  # on the dearest node per GPU-hour (its node keeps other pods)


class ReplicaView(NamedTuple):
    """One replica as the world sees it when its fleet scales down.

    ``price_usd_h``: what the GPUs under the replica cost per GPU-hour while they run (its node's tier price;
    0 for a replica not placed yet); ``committed``: its node is held under a reservation, paid whether used or
    not; ``alone``: no other pod runs on the replica's node(s), so stopping it empties them."""

    ready: bool
    node: int = -1
    price_usd_h: float = 0.0
    committed: bool = False
    alone: bool = False


@dataclass(frozen=True, slots=True)
class VictimChoice:
    index: int  # into the replicas as given (oldest first)
    reason: str


def saving_usd_h(r: ReplicaView) -> float:
    """What stopping the replica saves per GPU-hour once its node is gone: nothing on a reserved node."""
    return 0.0 if r.committed else r.price_usd_h


def _rank_keys(replicas: Sequence[ReplicaView], *, every: bool = False) -> list[tuple[float, bool, int]]:
    """The cost-aware rule's key of each ready replica (``every``: of each replica), larger: stopped first, oldest
    first: its saving (:func:`saving_usd_h`, written out: one comprehension over the fleet), alone on its node,
    newest. The index makes every key distinct, so ordering the keys themselves is the rule's order."""
    return [
        (0.0 if committed else price, alone, j)
        for j, (ready, _node, price, committed, alone) in enumerate(replicas)
        if every or ready
    ]


def _ranked(replicas: Sequence[ReplicaView], k: int, cost_aware: bool) -> list[VictimChoice]:
    n = len(replicas)
    if not 0 <= k <= n:
        raise ValueError(f"cannot stop {k} of {n} replicas")
    if cost_aware:
        keys = _rank_keys(replicas)
        not_ready = [] if len(keys) == n else [i for i in range(n) if not replicas[i].ready]
        return dearest_first_keys(keys, not_ready, k)
    starting = [i for i in range(n - 1, -1, -1) if not replicas[i].ready][:k]
    out = [VictimChoice(i, NOT_READY) for i in starting]
    m = k - len(out)
    if m <= 0:
        return out
    ready = [i for i in range(n) if replicas[i].ready]
    return out + [VictimChoice(i, NEWEST) for i in reversed(ready[-m:])]


def dearest_first_keys(keys: list[tuple[float, bool, int]], not_ready: list[int], k: int) -> list[VictimChoice]:
    """:func:`dearest_first` from what it ranks, for a world that writes the keys itself (no
    :class:`ReplicaView` per replica): ``keys`` the :func:`_rank_keys` of the ready replicas (oldest first),
    ``not_ready`` the indices of the others, ascending; ``k`` at most the replicas in all."""
    out = [VictimChoice(i, NOT_READY) for i in reversed(not_ready[-k:])] if not_ready and k > 0 else []
    m = k - len(out)
    if m <= 0:
        return out
    newest = {key[2] for key in keys[-m:]}  # what Kubernetes' default would stop
    # the m largest keys, largest first (heapq.nlargest's answer: keys are distinct), sorted in C
    top = [max(keys)] if m == 1 else sorted(keys, reverse=True)[:m]
    for _saving, alone, j in top:
        out.append(VictimChoice(j, NEWEST if j in newest else DEAREST_EMPTIES_NODE if alone else DEAREST))
    return out


def newest_first(replicas: Sequence[ReplicaView], k: int = 1) -> list[VictimChoice]:
    """Kubernetes' default for ``k`` replicas: the replicas not ready yet (newest first), then the newest."""
    return _ranked(replicas, k, cost_aware=False)


def dearest_first(replicas: Sequence[ReplicaView], k: int = 1) -> list[VictimChoice]:
    """gpufleet's rule for ``k`` replicas, ranked once on one observation: the replicas not ready yet (newest
    first), then the ready ones by (saving per GPU-hour, alone on its node, newest) (module docstring). Reason
    ``victim_newest`` for a replica that Kubernetes' default would have stopped in the same batch."""
    return _ranked(replicas, k, cost_aware=True)


def deletion_costs(replicas: Sequence[ReplicaView]) -> list[int]:
    """A ``controller.kubernetes.io/pod-deletion-cost`` per replica (lower: deleted first) in
    :func:`dearest_first`'s full order: the replica it would stop first gets 0 (the replicas not ready yet come
    first, as Kubernetes itself deletes them first), the cheapest to keep (on a reserved node, the oldest) the
    highest."""
    costs = [0] * len(replicas)
    for rank, c in enumerate(dearest_first(replicas, len(replicas))):
        costs[c.index] = rank
    return costs


@dataclass(frozen=True, slots=True)
class VictimRule:
    """A loop's scale-down rule: ``cost_aware`` (:func:`dearest_first`) or Kubernetes' default
    (:func:`newest_first`)."""

    cost_aware: bool = False

    def choose(self, replicas: Sequence[ReplicaView], k: int = 1) -> list[VictimChoice]:
        """The ``k`` replicas to stop, ranked once on one observation (as Kubernetes' ReplicaSet controller ranks
        its pods once per sync and deletes the lowest ranked)."""
        return dearest_first(replicas, k) if self.cost_aware else newest_first(replicas, k)


KUBERNETES_DEFAULT = VictimRule(cost_aware=False)
COST_AWARE = VictimRule(cost_aware=True)


# --- the same rule on an observed Kubernetes cluster -------------------------------------------------------------

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
REASON_DELETION_COST = "replica_deletion_cost"  # the audit reason of the annotations written before a scale-down


def node_price_usd_h(
    node: ObservedNode, catalog: PriceCatalog, sku_map: Mapping[str, str] | None = None
) -> tuple[float, bool]:
    """(price per GPU-hour, committed) of an observed node from its GPU product and capacity type: a ``reserved``
    node is committed (paid whether used or not); spot pays the catalog's spot price, anything else on demand. A
    product the catalog does not know has price 0 (nothing known to save)."""
    sku = sku_for(node.sku, catalog.sku_ids(), sku_map or {}) if node.sku else None
    lp = catalog.list_price(sku) if sku is not None else None
    if node.capacity_type == "reserved":
        return (float(lp.reserved_1y) if lp is not None else 0.0), True
    if lp is None:
        return 0.0, False
    return float(lp.spot if node.capacity_type == "spot" else lp.on_demand), False


def deployment_replicas(obs: Observation, namespace: str, name: str) -> list[ObservedPod]:
    """The active pods of Deployment ``namespace/name`` (owned by one of its ReplicaSets, named
    ``<deployment>-<pod-template-hash>``), oldest first (creation time, then name)."""
    pods = [
        p
        for p in obs.pods
        if p.namespace == namespace
        and p.active
        and p.owner_kind == "ReplicaSet"
        and p.owner_name.rpartition("-")[0] == name
    ]
    return sorted(pods, key=lambda p: (p.created, p.name))


def observed_replica_views(
    obs: Observation, replicas: Sequence[ObservedPod], price: Callable[[ObservedNode], tuple[float, bool]]
) -> list[ReplicaView]:
    """One :class:`ReplicaView` per replica: ready (the pod's Ready condition), its node's price and commitment,
    and alone (no other active GPU pod on its node)."""
    nodes = {n.name: n for n in obs.nodes}
    gpu_pods_on = Counter(p.node for p in obs.pods if p.active and p.node and p.request.num_gpu > 0)
    views = []
    for p in replicas:
        node = nodes.get(p.node)
        if node is None:  # not bound yet (or its node is gone): serves nothing
            views.append(ReplicaView(ready=False))
            continue
        usd_h, committed = price(node)
        alone = gpu_pods_on[p.node] - (1 if p.request.num_gpu > 0 else 0) == 0
        ready = p.ready and p.phase == "Running"
        views.append(ReplicaView(ready, price_usd_h=usd_h, committed=committed, alone=alone))
    return views


@dataclass(frozen=True, slots=True)
class DeletionCost:
    """Write ``cost`` as the pod's ``controller.kubernetes.io/pod-deletion-cost`` (``was``: its value now)."""

    namespace: str
    pod: str
    cost: int
    was: str


def deletion_cost_plan(
    obs: Observation, namespace: str, name: str, price: Callable[[ObservedNode], tuple[float, bool]]
) -> tuple[DeletionCost, ...]:
    """The pod-deletion-cost annotations that put Deployment ``namespace/name``'s replicas in
    :func:`dearest_first`'s order (the replica on the dearest node lowest), only those whose value changes."""
    replicas = deployment_replicas(obs, namespace, name)
    costs = deletion_costs(observed_replica_views(obs, replicas, price))
    out = []
    for p, cost in zip(replicas, costs, strict=True):
        was = p.annotation(DELETION_COST)
        if was != str(cost):
            out.append(DeletionCost(p.namespace, p.name, cost, was))
    return tuple(out)
