"""Node and pod inventory from a cluster into the store (the service's ``nodes`` table).

:func:`sync_inventory` makes the store's nodes of one cluster equal to what the cluster reports: one row per
GPU node (id ``<cluster>:<node>``, ``gpus_total`` = allocatable ``nvidia.com/gpu``, ``allocations_json`` =
the active pods bound there as ``{"workload_id", "gpus"}``, workload = the pod's owner, else the pod) in one
transaction, rows for vanished nodes deleted, and one audit event ``k8s.inventory_synced``. This is what the
service's bin-packing report (``GET /v1/clusters/{cluster}/binpack``) reads, so it now sees the real cluster.

GPU products map to catalog SKU ids by ``sku_map`` (product -> id) or else by tokens: a SKU id's ``_``-parts
must all be ``-``-tokens of the product (``h100_80gb`` matches ``NVIDIA-H100-80GB-HBM3``). A node whose
product maps to no SKU is skipped and reported. Shares (``gpufleet.io/gpu-milli``) count as one GPU.
No schema change: the existing tables hold it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.engine import writer
from gpufleet.adapters.sql.models import AuditEventRow, ClusterRow, NodeRow, SkuRow
from gpufleet.control.observation import Observation
from gpufleet.domain.catalog import sku_for
from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class InventorySync:
    cluster_id: str
    nodes_written: int
    nodes_deleted: int
    pods_allocated: int
    skipped: tuple[tuple[str, str], ...]  # (node, reason code)


def check_sku_map(sku_map: Mapping[str, str], sku_ids: Sequence[str]) -> None:
    """Every SKU id ``sku_map`` (``--sku PRODUCT=SKU_ID``) names is in the catalog (else a ValidationError naming
    ``--sku``)."""
    for product, wanted in sku_map.items():
        if wanted not in sku_ids:
            raise ValidationError("--sku", f"{product}={wanted}: no SKU {wanted!r} in the catalog")


def sync_inventory(
    engine: Engine, cluster_id: str, obs: Observation, *, sku_map: Mapping[str, str] | None = None, now_s: int = 0
) -> InventorySync:
    sku_map = dict(sku_map or {})
    with Session(writer(engine)) as s, s.begin():  # the write lock at BEGIN (SQLite): no lock upgrade to lose
        if s.get(ClusterRow, cluster_id) is None:
            raise ValidationError("--cluster", f"cluster {cluster_id!r} is not in the store (create it first)")
        sku_ids = list(s.scalars(select(SkuRow.id)).all())
        check_sku_map(sku_map, sku_ids)
        allocs: dict[str, list[dict[str, object]]] = {}
        pods = 0
        for p in obs.pods:
            if p.active and p.node and p.request.num_gpu > 0:
                wid = f"{p.namespace}/{p.owner_name}" if p.owner_name else p.key
                allocs.setdefault(p.node, []).append({"workload_id": wid, "gpus": p.request.num_gpu})
                pods += 1
        skipped: list[tuple[str, str]] = []
        keep: set[str] = set()
        for n in obs.nodes:
            if n.spec.gpu_count <= 0:
                continue
            sku = sku_for(n.sku, sku_ids, sku_map)
            if sku is None:
                skipped.append((n.name, "unknown_sku"))
                continue
            rid = f"{cluster_id}:{n.name}"
            keep.add(rid)
            body = json.dumps(sorted(allocs.get(n.name, []), key=lambda a: str(a["workload_id"])), sort_keys=True)
            row = s.get(NodeRow, rid)
            if row is None:
                s.add(
                    NodeRow(
                        id=rid, cluster_id=cluster_id, sku_id=sku, gpus_total=n.spec.gpu_count, allocations_json=body
                    )
                )
            else:
                row.sku_id, row.gpus_total, row.allocations_json = sku, n.spec.gpu_count, body
        gone = [r for r in s.scalars(select(NodeRow.id).where(NodeRow.cluster_id == cluster_id)).all() if r not in keep]
        if gone:
            s.execute(delete(NodeRow).where(NodeRow.id.in_(gone)))
        out = InventorySync(cluster_id, len(keep), len(gone), pods, tuple(skipped))
        s.add(AuditEventRow(at_s=now_s, actor="gpufleet-k8s", action="k8s.inventory_synced", entity="cluster",
                            entity_id=cluster_id, detail_json=json.dumps({"nodes": len(keep), "deleted": len(gone),
                                                                          "pods": pods, "skipped": skipped})))  # fmt: skip
    return out
