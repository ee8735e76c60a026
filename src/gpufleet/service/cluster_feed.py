"""What a cluster's controller has fed the store (``GET /v1/clusters/{cluster}/feed``): is the real fleet reaching
the planning pass?

* ``inventory``: the last inventory sync (its audit event ``k8s.inventory_synced``: when, nodes, pods) and the syncs
  of the last day; ``stale`` when the last one is older than ``INVENTORY_STALE_S``.
* ``usage``: the controller's metered hours (utilization records whose source is ``k8s:<cluster>:...``,
  ``adapters/kubernetes/usage.py``): the last hour written, its records, and over the last day the GPU-hours and the
  share whose utilization was not measured; ``stale`` when the last hour started more than ``USAGE_STALE_S`` ago
  (the meter writes an hour a few minutes after it ends).

Each is ``never`` when nothing was fed. Admins and viewers read it; app_team tokens do not (403).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, func, select

from gpufleet.adapters.sql.models import AuditEventRow, ClusterRow, UtilizationRow
from gpufleet.domain.errors import NotFoundError, PermissionDenied
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork

DAY_S = 86_400
INVENTORY_STALE_S = 600  # ten syncs at the controller's default minute
USAGE_STALE_S = 3 * 3600  # the last hour written started more than three hours ago: two hours missing
SYNCED = "k8s.inventory_synced"


def _status(last_s: int | None, now_s: int, stale_s: int) -> str:
    if last_s is None:
        return "never"
    return "stale" if now_s - last_s > stale_s else "ok"


class ClusterFeedService:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    def feed(self, actor: Actor, cluster_id: str) -> dict[str, Any]:
        if actor.role is Role.APP_TEAM:
            raise PermissionDenied("app_team tokens do not read what clusters feed the store")
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=False) as uow:
            s = uow.session
            if s.get(ClusterRow, cluster_id) is None:
                raise NotFoundError("cluster", cluster_id)
            synced = (AuditEventRow.entity_id == cluster_id, AuditEventRow.entity == "cluster",
                      AuditEventRow.action == SYNCED)  # fmt: skip
            last = s.execute(
                select(AuditEventRow.at_s, AuditEventRow.detail_json).where(*synced).order_by(AuditEventRow.id.desc())
            ).first()
            syncs_day = s.scalar(select(func.count()).where(*synced, AuditEventRow.at_s >= now_s - DAY_S)) or 0
            ours = UtilizationRow.source.startswith(f"k8s:{cluster_id}:", autoescape=True)
            # cluster ids with ':' are refused now (adapters/kubernetes/usage.py cluster_id_problem); one registered
            # before, "prod:eu", writes sources that start with "k8s:prod:": they are its own, not "prod"'s
            longer = s.scalars(
                select(ClusterRow.id).where(ClusterRow.id.startswith(f"{cluster_id}:", autoescape=True))
            ).all()
            for other in longer:
                ours = ours & ~UtilizationRow.source.startswith(f"k8s:{other}:", autoescape=True)
            last_hour = s.scalar(select(func.max(UtilizationRow.bucket_start_s)).where(ours))
            records = (
                s.scalar(select(func.count()).where(ours, UtilizationRow.bucket_start_s == last_hour))
                if last_hour is not None
                else 0
            )
            gpu_s, unmeasured_s = s.execute(
                select(
                    func.sum(UtilizationRow.gpus_allocated * UtilizationRow.bucket_s),
                    func.sum(UtilizationRow.gpus_allocated * UtilizationRow.bucket_s).filter(
                        UtilizationRow.gpu_util.is_(None)
                    ),
                ).where(ours, UtilizationRow.bucket_start_s >= now_s - DAY_S)
            ).one()
        detail = json.loads(last[1]) if last is not None else {}
        day_h = float(gpu_s or 0.0) / 3600.0
        return {
            "cluster": cluster_id,
            "now_s": now_s,
            "inventory": {
                "status": _status(last[0] if last is not None else None, now_s, INVENTORY_STALE_S),
                "last_synced_s": last[0] if last is not None else None,
                "nodes": detail.get("nodes"),
                "pods": detail.get("pods"),
                "syncs_last_day": int(syncs_day),
            },
            "usage": {
                "status": _status(int(last_hour) if last_hour is not None else None, now_s, USAGE_STALE_S),
                "last_hour_s": int(last_hour) if last_hour is not None else None,
                "records_last_hour": int(records or 0),
                "gpu_hours_last_day": round(day_h, 3),
                "util_unmeasured_share_last_day": round(float(unmeasured_s or 0.0) / 3600.0 / day_h, 4)
                if day_h > 0
                else None,
            },
        }
