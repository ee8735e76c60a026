"""Karpenter NodePool limits that follow procurement (``gpufleet controller ... --node-limits-every-s``).

The service buys reserved capacity (``POST /v1/plans:propose``, the reconciler, the approvals); the cluster launches
nodes through Karpenter NodePools. With this, the store-linked controller keeps the GPU limit of each NodePool that
``gpufleet k8s quotas`` emitted (label ``app.kubernetes.io/managed-by=gpufleet``, or another selector: ``--node-limits-
selector``; each pins one GPU product and one capacity type) equal to what the store says for the cluster's region:

* ``reserved``: the GPUs of the SKU's reservations active now in the region (status ``active``, within their term):
  Karpenter launches on reserved capacity up to what is bought, no further;
* ``on-demand`` and ``spot``: the quota of the region's pool of that tier; a pool with no quota stated leaves the
  limit alone.

Only ``spec.limits["nvidia.com/gpu"]`` is written (a merge patch), and only where it differs; the rest of each
NodePool, and every NodePool the selector does not select, is the operator's. A NodePool whose product maps to no SKU
(``--sku`` or the name tokens), or whose SKU has no pool of its tier in the region, is left alone and reported. So are
the NodePools of one SKU and launched tier when the selector selects several (per zone, say): each at the whole quota
would let Karpenter launch that many times the quota, and how to split it between them is the operator's call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.adapters.kubernetes.act import MANAGED_BY, Actuator
from gpufleet.adapters.kubernetes.fleetobjects import PATHS
from gpufleet.adapters.kubernetes.labels import node_pool_from_json
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.kubernetes.usage import TIERS
from gpufleet.adapters.sql.models import ClusterRow, PoolRow, ReservationRow, SkuRow
from gpufleet.control.observation import ObservedNodePool
from gpufleet.domain.catalog import sku_for
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.reservations import term_seconds

GPU = "nvidia.com/gpu"
DEFAULT_SELECTOR = f"{MANAGED_BY}=gpufleet"  # the NodePools `gpufleet k8s quotas` emitted


@dataclass(frozen=True, slots=True)
class StoreCapacity:
    """What the store says the cluster's region may run: ``pools`` (sku, store tier) -> quota (None: not stated),
    ``reserved_gpus``: the GPUs of the reservations active now, by SKU."""

    region: str
    sku_ids: tuple[str, ...]
    pools: Mapping[tuple[str, str], int | None]
    reserved_gpus: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class LimitChange:
    node_pool: str
    sku: str
    tier: str  # Karpenter's capacity type
    current: int | None
    desired: int
    reason: str  # reserved_active | pool_quota


def store_capacity(session: Session, cluster: str, now_s: float) -> StoreCapacity:
    """The cluster's region, its pools and the reservations active there at ``now_s`` (a ValidationError naming
    ``--cluster`` when the store has no such cluster)."""
    c = session.get(ClusterRow, cluster)
    if c is None:
        raise ValidationError("--cluster", f"cluster {cluster!r} is not in the store")
    pools: dict[tuple[str, str], int | None] = {}
    for sku, tier, quota in session.execute(
        select(PoolRow.sku_id, PoolRow.tier, PoolRow.quota_gpus).where(PoolRow.region_id == c.region_id)
    ).all():
        key = (sku, tier)  # several pools of a tier in the region: their quotas add up; one unbounded, unbounded
        if quota is None or (key in pools and pools[key] is None):
            pools[key] = None
        else:
            pools[key] = (pools.get(key) or 0) + int(quota)
    reserved: dict[str, int] = {}
    for sku, units, start, term in session.execute(
        select(ReservationRow.sku_id, ReservationRow.units, ReservationRow.start_s, ReservationRow.term_months).where(
            ReservationRow.region_id == c.region_id, ReservationRow.status == "active"
        )
    ).all():
        if start <= now_s < start + term_seconds(term):
            reserved[sku] = reserved.get(sku, 0) + int(units)
    sku_ids = tuple(session.scalars(select(SkuRow.id)).all())
    return StoreCapacity(c.region_id, sku_ids, pools, reserved)


def limit_changes(
    node_pools: Sequence[ObservedNodePool], cap: StoreCapacity, sku_map: Mapping[str, str] | None = None
) -> tuple[list[LimitChange], list[tuple[str, str]]]:
    """The limit each gpufleet NodePool should have (module docstring), where it differs from its current one; and
    the NodePools left alone with why (``no_sku``, ``no_pool``, ``no_quota_stated``, ``quota_shared``: one of several
    NodePools of a SKU's launched tier)."""
    changes: list[LimitChange] = []
    skipped: list[tuple[str, str]] = []
    launched: dict[tuple[str, str], int] = {}  # (SKU, capacity type) -> NodePools of a launched tier selected
    for np_ in node_pools:
        if len(np_.products) == 1 and len(np_.capacity_types) == 1 and np_.capacity_types[0] in ("on-demand", "spot"):
            sku = sku_for(np_.products[0], list(cap.sku_ids), sku_map or {})
            if sku is not None:
                launched[(sku, np_.capacity_types[0])] = launched.get((sku, np_.capacity_types[0]), 0) + 1
    for np_ in node_pools:
        if len(np_.products) != 1 or len(np_.capacity_types) != 1:
            skipped.append((np_.name, "not_one_product_and_tier"))
            continue
        product, ctype = np_.products[0], np_.capacity_types[0]
        if ctype not in TIERS:
            continue
        sku = sku_for(product, list(cap.sku_ids), sku_map or {})
        if sku is None:
            skipped.append((np_.name, "no_sku"))
            continue
        key = (sku, TIERS[ctype])
        if key not in cap.pools:
            skipped.append((np_.name, "no_pool"))
            continue
        if ctype == "reserved":
            desired, reason = cap.reserved_gpus.get(sku, 0), "reserved_active"
        else:
            quota = cap.pools[key]
            if quota is None:
                skipped.append((np_.name, "no_quota_stated"))
                continue
            if launched.get((sku, ctype), 0) > 1:
                skipped.append((np_.name, "quota_shared"))
                continue
            desired, reason = quota, "pool_quota"
        if np_.gpu_limit != desired:
            changes.append(LimitChange(np_.name, sku, ctype, np_.gpu_limit, desired, reason))
    return changes, skipped


def apply_limits(act: Actuator, changes: Sequence[LimitChange]) -> list[str]:
    """Merge-patch each NodePool's GPU limit (audit ``node_pool_limit``, with the limit before and after)."""
    out = []
    for c in changes:
        body = {"spec": {"limits": {GPU: str(c.desired)}}}
        path = f"{PATHS['NodePool']}/{c.node_pool}"
        out.append(act.merge_patch(path, body, "node_pool_limit", c.node_pool, c.reason, sku=c.sku, before=c.current,
                                   after=c.desired))  # fmt: skip
    return out


def selected_node_pools(kube: Kube, selector: str) -> list[ObservedNodePool]:
    """The NodePools the label selector selects, read from the API server now."""
    body = kube.get(PATHS["NodePool"], labelSelector=selector)
    return [node_pool_from_json(o) for o in body.get("items", [])]
