"""Cluster bin-packing report over stored nodes: fragmentation, and the moves that free whole nodes.

The decision is :func:`gpufleet.control.packing.plan_repack` (see there for the rules and reason codes); this
module loads the cluster's nodes and the traits of the workloads on them.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, select

from gpufleet.adapters.sql.models import ClusterRow, NodeRow, WorkloadRow
from gpufleet.control.packing import NodeLoad, WorkloadTraits, plan_repack
from gpufleet.domain.errors import NotFoundError, PermissionDenied
from gpufleet.domain.workloads import WorkloadKind
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork


class BinpackService:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    def report(self, actor: Actor, cluster_id: str) -> dict[str, Any]:
        if actor.role is Role.APP_TEAM:
            raise PermissionDenied("app_team tokens do not read cluster packing")
        with UnitOfWork(self._engine, write=False) as uow:
            if uow.session.get(ClusterRow, cluster_id) is None:
                raise NotFoundError("cluster", cluster_id)
            rows = uow.session.scalars(
                select(NodeRow).where(NodeRow.cluster_id == cluster_id).order_by(NodeRow.id)
            ).all()
            nodes = [
                NodeLoad(
                    r.id,
                    r.gpus_total,
                    [(a["workload_id"], int(a["gpus"])) for a in json.loads(r.allocations_json)],
                    r.sku_id,
                )
                for r in rows
            ]
            wids = sorted({w for n in nodes for w, _ in n.allocations})
            traits = {
                w.id: WorkloadTraits(
                    latency_sensitive=w.kind == WorkloadKind.SERVING.value,
                    checkpointable=w.kind == WorkloadKind.TRAINING.value and w.checkpoint_interval_s is not None,
                )
                for w in uow.session.scalars(select(WorkloadRow).where(WorkloadRow.id.in_(wids))).all()
            }
        plan = plan_repack(nodes, traits, self._clock.now_s())
        return {
            "cluster": cluster_id,
            "nodes": len(nodes),
            "gpus_total": sum(n.gpus_total for n in nodes),
            "gpus_used": sum(n.used for n in nodes),
            "fragmentation": plan.fragmentation,
            "suggested_moves": plan.moves,
            "nodes_freed": plan.nodes_freed,
            "skipped_nodes": plan.skipped,
            "fragmentation_after": plan.fragmentation_after,
        }
