"""What a pending gang can reach on a Kubernetes cluster: the node release's (``control/node_release.py``) reading
of ``ScaleDownContext.unreachable_gang_gpus``.

``unreachable_gang_gpus`` (as the simulator's ``Provisioner.unreachable_gang_gpus``): the GPUs of the product's
pending pods when every one of them is in a gang (``ObservedPod.gang``, per namespace) that cannot complete from
what is at hand (:func:`unreachable_gangs`); the scaler then lets idle nodes go by its rent-or-buy holds
(``pending_gang_out_of_reach``) instead of holding all of them. A gang needs ``gang_min`` members (else the
members seen) less those bound; its reach is the pods of its smallest member's GPUs that fit on the free GPUs of
the uncordoned nodes of the products it may run on (its request's models or nodeSelector
``nvidia.com/gpu.product``; none: every product), Ready or still starting, plus the whole nodes their Karpenter
NodePools may still launch: each NodePool's ``spec.limits["nvidia.com/gpu"]`` less the GPUs of its nodes
(:func:`launch_room_gpus`, read from the API server, :class:`~gpufleet.control.observation.ObservedNodePool`).
Unbounded (so nothing is out of reach, 0 as before) when a NodePool that may launch the product has no GPU
limit, or when NodePools are not observed (no Karpenter). Taints are honoured as Kubernetes scheduling does
(:func:`admits`): a node's free GPUs count for a gang only if one of its pods tolerates every NoSchedule and
NoExecute taint of the node, a NodePool (its room, or its missing limit) only if one of them tolerates its
template's taints (gpufleet's spot NodePool carries ``gpufleet.io/spot=true:NoSchedule``: a gang that may not
use spot counts no spot node or room); so the reach is per gang, by its pods' tolerations. The taints a node
carries while it starts or is unwell (:data:`PASSING_TAINTS`) pass, and so do its NodePool's ``startupTaints``
(``ObservedNodePool.startup_taints``, the NodePool by the node's ``karpenter.sh/nodepool`` label) until
Karpenter marks the node initialised (:data:`INITIALIZED`), as Karpenter's own scheduling reads them; a
NodePool's room is not narrowed by them. Every other doubt counts as reach: an
unpinned GPU NodePool counts for every product, other limits (``cpu``, ``nodes``) are not read, nodes
Karpenter has claimed but not yet registered leave their GPUs in the room; a starting node that shows no GPUs
yet counts once (whole among the free nodes, at its product's GPUs per node against its NodePool's limit).
Not observable: stock-outs (a NodePool within its limit whose instances the provider cannot supply still
counts as room, so such a gang holds nodes as before) and a GPU NodePool that shows no GPU sign (no product
pin, GPU limit or ``instance-gpu-*`` requirement: it is taken for a CPU NodePool).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.control.buffer_pods import PRODUCT_SELECTOR
from gpufleet.control.observation import Observation, ObservedNode, ObservedNodePool, ObservedPod

# taints a node carries while it starts or is unwell, gone once it is up (Kubernetes' condition taints, the cloud
# provider's and Karpenter's until the node is initialised and registered): a doubt, they do not keep a pod off
PASSING_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/uninitialized", "karpenter.sh/unregistered")
# Karpenter's node label once its NodePool's startup taints are gone: one that comes back after it lasts
INITIALIZED = "karpenter.sh/initialized=true"


@dataclass(frozen=True, slots=True)
class ProductReach:
    """What one GPU product has at hand for a pending gang: the free GPUs of each uncordoned node (Ready or still
    starting), the GPUs per node (0: none observed) and the GPUs its NodePools may still launch (None: no bound)."""

    per_node: int
    free_gpus: tuple[int, ...]
    launch_gpus: int | None

    def slots(self, gpus: int) -> int | None:
        """How many pods of ``gpus`` GPUs fit on its nodes and on the whole nodes it may still launch (None: no
        bound). With no node observed, a launched node is taken to fit one such pod per ``gpus`` GPUs of room."""
        if self.launch_gpus is None:
            return None
        g = max(1, gpus)
        launch = self.launch_gpus // self.per_node * (self.per_node // g) if self.per_node else self.launch_gpus // g
        return sum(f // g for f in self.free_gpus) + launch


def admits(pods: Sequence[ObservedPod] | None, taints: Iterable[str], startup: Collection[str] = ()) -> bool:
    """Whether a node (or a NodePool's nodes) with ``taints`` (NoSchedule, NoExecute) may take one of ``pods``:
    one of them tolerates each of its taints but the passing ones (:data:`PASSING_TAINTS` and ``startup``, a
    starting node's NodePool's startup taints). None: any pod."""
    lasting = [t for t in taints if not t.startswith(PASSING_TAINTS) and t not in startup]
    return pods is None or not lasting or any(all(p.tolerates(t) for t in lasting) for p in pods)


def launch_room_gpus(
    product: str,
    pools: Sequence[ObservedNodePool] | None,
    nodes: Iterable[ObservedNode],
    per_node: Mapping[str, int] | None = None,
    pods: Sequence[ObservedPod] | None = None,
) -> int | None:
    """The GPUs Karpenter may still launch for ``product`` (for one of ``pods``: its NodePools whose template taints
    one of them tolerates, :func:`admits`; None: for any pod): over the NodePools that may launch it (pinned to it,
    holding nodes of it, or GPU NodePools pinned to no product), each one's ``nvidia.com/gpu`` limit less the GPUs
    of its nodes (all its observed nodes, cordoned ones too: they count until deleted; a node of a GPU product
    that shows no GPUs yet, a starting one, counts the product's GPUs per node of ``per_node``, as Karpenter
    counts its claim against the limit). None (no bound) when one of them has no GPU limit, or when NodePools are
    not observed (no Karpenter: launches are not ours to read)."""
    if pools is None:
        return None
    used: dict[str, int] = {}
    seen: dict[str, set[str]] = {}
    for n in nodes:
        if n.node_pool:
            gpus = n.spec.gpu_count or (per_node or {}).get(n.sku, 0)
            used[n.node_pool] = used.get(n.node_pool, 0) + gpus
            seen.setdefault(n.node_pool, set()).add(n.sku)
    room = 0
    for p in pools:
        if not pool_launches(p, product, seen.get(p.name, ())):
            continue
        if not admits(pods, p.taints):
            continue
        if p.gpu_limit is None:
            return None
        room += max(0, p.gpu_limit - used.get(p.name, 0))
    return room


def pool_launches(pool: ObservedNodePool, product: str, holds: Collection[str]) -> bool:
    """Whether ``pool`` may launch ``product``: it holds nodes of it (``holds``: its nodes' products), pins it (a GPU
    name like "h100" matches the products that contain it) or, pinned to no product, shows it launches GPU nodes."""
    if product in holds:
        return True
    if pool.products:
        return any(v == product or v.lower() in product.lower() for v in pool.products)
    return pool.gpu


def pod_products(p: ObservedPod) -> tuple[str, ...]:
    """The GPU products a pod may run on: its request's models, else its nodeSelector's product; () = any."""
    if p.request.gpu_models:
        return p.request.gpu_models
    return tuple(s.removeprefix(PRODUCT_SELECTOR) for s in p.request.node_selector if s.startswith(PRODUCT_SELECTOR))


def may_run(products: tuple[str, ...], sku: str) -> bool:
    """Whether a pod that may run on ``products`` (:func:`pod_products`; () = any) may run on ``sku``."""
    return not products or sku in products


def unreachable_gangs(
    pending: Iterable[ObservedPod],
    bound: Iterable[ObservedPod],
    reach: Callable[[Sequence[ObservedPod]], Mapping[str, ProductReach]],
) -> frozenset[tuple[str, str]]:
    """The pending gangs ((namespace, gang)) that cannot complete from what is at hand: fewer pods of their
    smallest member's GPUs fit on the products they may run on (:meth:`ProductReach.slots`, summed over them,
    of ``reach(members)``: what the gang's pods tolerate; a product without an entry counts nothing) than members
    they still need (``gang_min``, else the members seen, less the members already bound). Pods not in a gang are
    never out of reach."""
    groups: dict[tuple[str, str], list[ObservedPod]] = {}
    for p in pending:
        if p.gang:
            groups.setdefault((p.namespace, p.gang), []).append(p)
    placed: dict[tuple[str, str], int] = {}
    for p in bound:
        if p.gang:
            placed[(p.namespace, p.gang)] = placed.get((p.namespace, p.gang), 0) + 1
    out: set[tuple[str, str]] = set()
    for key, members in groups.items():
        size = max(m.gang_min for m in members) or len(members) + placed.get(key, 0)
        need = size - placed.get(key, 0)
        if need <= 0:
            continue
        gpus = min(m.request.num_gpu for m in members)
        at_hand = reach(members)
        products: set[str] = set()
        for m in members:
            mine = pod_products(m)
            if not mine:
                products = set(at_hand)
                break
            products.update(mine)
        slots = 0
        for product in sorted(products):
            r = at_hand.get(product)
            s = r.slots(gpus) if r is not None else 0
            if s is None:
                break
            slots += s
        else:
            if slots < need:
                out.add(key)
    return frozenset(out)


def unreachable_gang_gpus(pending: Iterable[ObservedPod], unreachable: frozenset[tuple[str, str]]) -> int:
    """``ScaleDownContext.unreachable_gang_gpus`` of one product: the GPUs of its pending pods (each once) when every
    one of them is in an unreachable gang, else 0."""
    total = 0
    for p in pending:
        if (p.namespace, p.gang) not in unreachable or not p.gang:
            return 0
        total += p.request.num_gpu
    return total


def product_reach(
    obs: Observation,
    gpu_nodes: list[ObservedNode],
    pending: list[ObservedPod],
    used: dict[str, int],
    members: Sequence[ObservedPod],
) -> dict[str, ProductReach]:
    """For a gang's ``members``, per GPU product (of the nodes, of the pending pods' pins and of the NodePools'
    pins): free GPUs of its uncordoned nodes, Ready or starting (a starting node whose GPUs are not yet
    allocatable counts whole), and its launch room, both only where one member tolerates the taints (a node's
    NodePool's startup taints pass until Karpenter has initialised it)."""
    per: dict[str, int] = {}
    for n in gpu_nodes:
        per[n.sku] = max(per.get(n.sku, 0), n.spec.gpu_count)
    startup = {pool.name: pool.startup_taints for pool in obs.node_pools or ()}
    free: dict[str, list[int]] = {}
    for n in obs.nodes:
        if not n.sku or n.unschedulable:
            continue
        passing = () if INITIALIZED in n.spec.labels else startup.get(n.node_pool, ())
        if not admits(members, n.spec.taints, passing):
            continue
        if n.spec.gpu_count > 0:
            free.setdefault(n.sku, []).append(max(0, n.spec.gpu_count - used.get(n.name, 0)))
        elif not n.ready and per.get(n.sku):
            free.setdefault(n.sku, []).append(per[n.sku])
    products = set(per) | {m for p in pending for m in pod_products(p)}
    products |= {m for np in obs.node_pools or () for m in np.products}  # a product Karpenter may launch
    return {
        s: ProductReach(
            per.get(s, 0), tuple(free.get(s, ())), launch_room_gpus(s, obs.node_pools, obs.nodes, per, members)
        )
        for s in products
    }
