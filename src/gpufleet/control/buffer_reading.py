"""What the start buffer reads of a Kubernetes observation for the node release (``control/node_release.py``):
each product's training jobs that arrived and started late (:func:`late_starts`, as the simulator's
``PodTable.late_starts``), and whether the product has spot capacity for the buffer's spot lane
(:func:`spot_capacity`). Readings only: the decision is :class:`~gpufleet.control.start_buffer.StartBuffer`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpufleet.control.buffer_pods import SPOT_TAINT
from gpufleet.control.gang_reach import may_run, pod_products, pool_launches
from gpufleet.control.observation import ObservedNode, ObservedNodePool, ObservedPod, rfc3339_s


def spot_capacity(product: str, pools: Sequence[ObservedNodePool] | None, nodes: Iterable[ObservedNode]) -> bool:
    """Whether the cluster has spot capacity of ``product`` for the start buffer's spot lane: a spot node of it,
    or (NodePools observed) a NodePool that may launch it (as :func:`~gpufleet.control.gang_reach.launch_room_gpus` reads it) pinned to the
    ``spot`` capacity type. NodePools not observed (no Karpenter): yes, as the catalog says."""
    nodes = list(nodes)
    if any(n.sku == product and n.capacity_type == "spot" for n in nodes):
        return True
    if pools is None:
        return True
    holds: dict[str, set[str]] = {}
    for n in nodes:
        if n.node_pool:
            holds.setdefault(n.node_pool, set()).add(n.sku)
    return any("spot" in p.capacity_types and pool_launches(p, product, holds.get(p.name, ())) for p in pools)


def late_starts(
    pods: Iterable[ObservedPod],
    product: str,
    now_s: float,
    window_s: int,
    within_s: int,
    node_products: Mapping[str, str] | None = None,
    may_use_spot: bool | None = None,
) -> tuple[int, int]:
    """The start buffer's reading for ``product`` (as the simulator's ``PodTable.late_starts``): the training jobs
    among ``pods`` (GPU pods not of kind ``serving``) that arrived (``created``) in the ``window_s`` before
    ``now_s``, and those of them that started (``started_s``: ``status.startTime``, the kubelet taking the bound
    pod) more than ``within_s`` after arriving or, not bound yet, still wait past it. A pod counts for ``product``
    when bound to a node of it (``node_products``: node name -> product), else, unbound or on a node not given,
    when it may run on it (:func:`~gpufleet.control.gang_reach.pod_products`: none pinned, or this one; the pending work's filter). A gang
    (``ObservedPod.gang``, per namespace) is one job, late when a member is. Skipped: pods whose creation time is
    unreadable, and pods that left unbound (finished or being deleted before a start: when they left is not
    seen). A bound pod without ``startTime`` (its ``started_s`` then falls back to the creation) reads as
    started at creation: the kubelet acknowledges a bound pod within moments. ``may_use_spot`` (None: every job)
    reads one lane of the start buffer: the jobs that tolerate gpufleet's spot taint (True) or those that do not
    (False); a gang is in the spot lane when one of its counted members tolerates it."""
    jobs: dict[tuple[str, str], bool] = {}
    spot: dict[tuple[str, str], bool] = {}
    for p in pods:
        if p.kind == "serving" or p.buffer or p.request.num_gpu <= 0:
            continue
        created = rfc3339_s(p.created)
        if created is None or not now_s - window_s < created <= now_s:
            continue
        on = (node_products or {}).get(p.node) if p.node else None
        if on is not None and on != product:
            continue
        if on is None and not may_run(pod_products(p), product):
            continue
        if p.node:
            started = p.started_s if p.started_s is not None else created
            late = started - created > within_s
        elif p.active:
            late = now_s - created > within_s
        else:
            continue
        key = (p.namespace, f"gang/{p.gang}") if p.gang else (p.namespace, p.name)
        jobs[key] = jobs.get(key, False) or late
        spot[key] = spot.get(key, False) or (may_use_spot is not None and p.tolerates(SPOT_TAINT))
    if may_use_spot is not None:
        jobs = {k: v for k, v in jobs.items() if spot[k] == may_use_spot}
    return len(jobs), sum(jobs.values())
