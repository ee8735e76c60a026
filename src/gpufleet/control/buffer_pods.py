"""The top-up half of the loop's start buffer in a cluster: placeholder pods that make Karpenter launch free nodes.

The node release (:class:`~gpufleet.control.node_release.NodeReleasePlanner`) steps the loop's start buffer
(:class:`~gpufleet.control.start_buffer.StartBuffer`) hourly per GPU product (per lane with ``StartBuffer.spot``)
and keeps idle nodes that hold it (the hold half). The simulator also launches the missing nodes
(``Provisioner.top_up_buffer``); gpufleet does not launch nodes in a cluster, Karpenter does, for pending pods. So
the top-up is the over-provisioning pattern Cluster Autoscaler's FAQ and Karpenter's docs describe: placeholder
pods of a negative-priority PriorityClass (preemption policy Never) that each request a whole node's GPUs of the
product (nodeSelector ``nvidia.com/gpu.product``, label ``gpufleet.io/buffer=true``). A placeholder of a product's
buffer (the jobs that may not use spot) tolerates no spot taint; one of its spot lane (``spot_lane(product)``,
checkpointed training: the jobs that tolerate the spot taint) also selects ``karpenter.sh/capacity-type=spot``
(:data:`SPOT_SELECTOR`, which tells the lanes' placeholders apart: :func:`placeholder_lane`) and tolerates the spot
taint (:data:`SPOT_TAINT`), so Karpenter launches a spot node for it. Karpenter launches a node for a pending
placeholder, gpufleet's binder binds it there, and a real pod that needs the GPUs preempts it (every real pod ranks
above it; ``control/preempting.py`` prices its eviction at nothing).

:func:`plan_buffer_pods` decides, per lane key of ``buffer_decisions`` (the planner's last decision per key: a
product, or its spot lane), how many placeholders of that lane to create and which to delete; the launch rule is
the buffer's (:meth:`StartBuffer.launch_nodes`): ``want_nodes`` the decision's nodes, ``per`` the product's GPUs
per node (the most GPUs a node of it shows), ``free_gpus`` the free GPUs on its uncordoned nodes that are not spot
(reserved and on-demand), or on its spot nodes for the spot lane (:func:`buffer_free_gpus`, the planner's
``buffer_free_gpus`` / ``spot_free_gpus``; a bound placeholder's GPUs count as free: they are the buffer),
``starting_nodes`` the lane's pending placeholders (Karpenter's launches for the buffer). Each lane creates and
deletes only its own placeholders. Placeholders beyond the buffer are deleted, pending ones first (newest first):
all when the decision is 0 nodes, those beyond the decision's nodes, and pending ones the free GPUs no longer need.
Placeholders of a lane with no decision are deleted. Decisions are data (:class:`BufferPods`);
``adapters/kubernetes/bufferpods.py`` creates and deletes.

What a placeholder is elsewhere: not a training job for the buffer's reading (``late_starts``), not pending work
that holds nodes, and its GPUs free for the node scaler's contexts and a gang's reach
(``node_release.py``); its node is busy, so a node holding a placeholder is never released (the placeholder is
deleted first when the buffer shrinks; the node is idle then).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.control.start_buffer import BufferDecision, StartBuffer, lane_sku, spot_lane
from gpufleet.domain.pools import SPOT_NODE_TAINT

REASON = "start_buffer_top_up"
PRODUCT_SELECTOR = "nvidia.com/gpu.product="  # a pod's nodeSelector entry pinning its GPU product
SPOT_SELECTOR = "karpenter.sh/capacity-type=spot"  # a spot-lane placeholder's nodeSelector entry
SPOT_TAINT = "{}={}:{}".format(*SPOT_NODE_TAINT)  # gpufleet's spot taint as ObservedPod.tolerates reads a taint


@dataclass(frozen=True, slots=True)
class BufferPods:
    """For one lane of a GPU product (its spot lane if ``spot``): placeholders of ``per_node`` GPUs to create, and
    those to delete (``namespace/name``)."""

    product: str
    per_node: int
    want_nodes: int
    create: int
    delete: tuple[str, ...]
    reason: str
    spot: bool = False  # the product's spot lane: placeholders on spot nodes

    @property
    def lane(self) -> str:
        """The start buffer's key of this lane: the product, or its spot lane."""
        return spot_lane(self.product) if self.spot else self.product


def placeholder_product(p: ObservedPod) -> str:
    """The product a placeholder holds a node of (its nodeSelector's ``nvidia.com/gpu.product``; "" if none)."""
    for s in p.request.node_selector:
        if s.startswith(PRODUCT_SELECTOR):
            return s.removeprefix(PRODUCT_SELECTOR)
    return p.request.gpu_models[0] if p.request.gpu_models else ""


def placeholder_lane(p: ObservedPod) -> str:
    """The start buffer's key a placeholder holds a node for: its product, or the product's spot lane when it
    selects spot nodes (:data:`SPOT_SELECTOR`)."""
    product = placeholder_product(p)
    return spot_lane(product) if SPOT_SELECTOR in p.request.node_selector else product


def real_used_gpus(pods: Iterable[ObservedPod]) -> dict[str, int]:
    """GPUs held per node by active bound pods that are not placeholders (a GPU share holds its GPU)."""
    used: dict[str, int] = {}
    for p in pods:
        if p.node and p.active and not p.buffer:
            used[p.node] = used.get(p.node, 0) + p.request.num_gpu
    return used


def buffer_free_gpus(
    nodes: Iterable[ObservedNode], product: str, used: Mapping[str, int], *, spot: bool = False
) -> int:
    """The free GPUs that count for the buffer of ``product``: on its Ready, uncordoned nodes that are not spot
    (reserved and on-demand), or (``spot``, its spot lane) on its spot nodes, less what real pods hold (``used``:
    :func:`real_used_gpus`)."""
    return sum(
        n.spec.gpu_count - min(used.get(n.name, 0), n.spec.gpu_count)
        for n in nodes
        if n.sku == product and n.spec.gpu_count > 0 and n.schedulable and (n.capacity_type == "spot") == spot
    )


def plan_buffer_pods(
    obs: Observation, decisions: Mapping[str, BufferDecision], buffer: StartBuffer
) -> tuple[BufferPods, ...]:
    """Placeholders to create and delete per lane (module docstring; ``decisions`` keyed by the start buffer's keys),
    sorted by key; lanes with nothing to do are left out."""
    per: dict[str, int] = {}
    for n in obs.nodes:
        if n.sku and n.spec.gpu_count > 0:
            per[n.sku] = max(per.get(n.sku, 0), n.spec.gpu_count)
    used = real_used_gpus(obs.pods)
    mine: dict[str, list[ObservedPod]] = {}
    for p in obs.pods:
        if p.buffer and p.active:
            mine.setdefault(placeholder_lane(p), []).append(p)
    out: list[BufferPods] = []
    for key in sorted(set(decisions) | set(mine)):
        product, spot = lane_sku(key)
        d = decisions.get(key)
        want = d.nodes if d is not None else 0
        size = per.get(product, 0)
        held = mine.get(key, [])
        pending = sorted((p for p in held if not p.node), key=lambda p: (p.created, p.key), reverse=True)
        bound = sorted((p for p in held if p.node), key=lambda p: (p.created, p.key), reverse=True)
        free = buffer_free_gpus(obs.nodes, product, used, spot=spot)
        create = buffer.launch_nodes(want, size, free, len(pending)) if size else 0
        needed = buffer.launch_nodes(want, size, free, 0) if size else 0
        drop = max(len(held) - want, len(pending) - needed, 0) if want else len(held)
        delete = tuple(p.key for p in (pending + bound)[:drop])
        if not create and not delete:
            continue
        why = (f"{key}: {want} node(s) of {size} GPUs wanted free, {free} free {'on' if spot else 'off'} spot, "
               f"{len(bound)} placeholder(s) bound, {len(pending)} pending: create {create}, delete {len(delete)}")  # fmt: skip
        out.append(BufferPods(product, size, want, create, delete, f"{REASON}: {why}", spot))
    return tuple(out)
