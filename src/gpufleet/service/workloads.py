"""Workloads: create, read (app teams see only their own), autoscaling with optimistic concurrency, and
rightsizing change requests."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.models import RightsizingChangeRow, SkuRow, TeamRow, TenantRow, WorkloadRow
from gpufleet.domain.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.domain.workloads import Priority, WorkloadKind
from gpufleet.service.auth import ADMINS, Actor, Role
from gpufleet.service.clock import Clock, IdGenerator
from gpufleet.service.uow import UnitOfWork

WRITERS = (*ADMINS, Role.APP_TEAM)


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """A workload as sent; None fields get defaults at creation (see :meth:`WorkloadService.create`)."""

    name: str
    image: str
    cpu: float | None
    mem_gb: float | None
    gpus: int
    gpu_sku: str
    min_replicas: int
    max_replicas: int | None
    scale_metric: str
    budget_usd_day: Decimal | None
    team: str
    tenant: str | None
    priority: str
    kind: str = WorkloadKind.SERVING.value
    checkpoint_interval_s: int | None = None
    target_rps: float | None = None


def workload_dict(row: WorkloadRow) -> dict[str, Any]:
    return {
        "workload_id": row.id,
        "name": row.name,
        "image": row.image,
        "kind": row.kind,
        "cpu": row.cpu,
        "mem_gb": row.mem_gb,
        "gpus": row.gpus,
        "gpu_sku": row.gpu_sku,
        "min_replicas": row.min_replicas,
        "max_replicas": row.max_replicas,
        "scale_metric": row.scale_metric,
        "target_rps": row.target_rps,
        "slo_s": row.slo_s,
        "max_concurrency": row.max_concurrency,
        "budget_usd_day": None if row.budget_cents_day is None else Decimal(row.budget_cents_day) / 100,
        "team": row.team_id,
        "tenant": row.tenant_id,
        "priority": row.priority,
        "checkpoint_interval_s": row.checkpoint_interval_s,
        "version": row.version,
        "created_at_s": row.created_at_s,
    }


def _resolve_sku(s: Session, text: str) -> SkuRow:
    """A SKU id, or a unique case-insensitive prefix of an id or a name (``H100`` -> ``h100_80gb``)."""
    row = s.get(SkuRow, text)
    if row is not None:
        return row
    needle = text.strip().lower().replace("-", "_").replace(" ", "_")
    rows = s.scalars(select(SkuRow).order_by(SkuRow.id)).all()
    hits = [
        r
        for r in rows
        if r.id.lower().startswith(needle)
        or r.name.lower().replace(" ", "_").replace("-", "_").startswith(needle)
        or r.name.lower().replace("nvidia ", "").replace(" ", "_").replace("-", "_").startswith(needle)
    ]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise ValidationError("gpu_sku", f"unknown SKU {text!r}")
    raise ValidationError("gpu_sku", f"{text!r} matches several SKUs ({', '.join(r.id for r in hits)}); give the id")


def _only_tenant(s: Session, team_id: str) -> str:
    ids = s.scalars(select(TenantRow.id).where(TenantRow.team_id == team_id).order_by(TenantRow.id).limit(2)).all()
    if len(ids) != 1:
        why = "has no tenant" if not ids else "has several tenants"
        raise ValidationError("tenant", f"team {team_id!r} {why}; name the tenant")
    return ids[0]


class WorkloadService:
    def __init__(self, engine: Engine, clock: Clock, ids: IdGenerator) -> None:
        self._engine = engine
        self._clock = clock
        self._ids = ids

    def create(self, actor: Actor, spec: WorkloadSpec) -> str:
        """Defaults for what the body omits: ``max_replicas`` = ``min_replicas``; ``cpu``/``mem_gb`` = the SKU
        node's share per GPU x ``gpus`` (one GPU's share for a CPU-only workload); ``tenant`` = the team's only
        tenant (422 naming ``tenant`` when it has several or none). ``gpu_sku`` resolves an id, or a unique
        case-insensitive prefix of a SKU id or name."""
        actor.require(*WRITERS)
        actor.require_team(spec.team)
        max_replicas = spec.min_replicas if spec.max_replicas is None else spec.max_replicas
        if max_replicas < spec.min_replicas:
            raise ValidationError("max_replicas", "must be >= min_replicas")
        try:
            Priority.parse(spec.priority)
        except KeyError:
            raise ValidationError("priority", f"unknown priority {spec.priority!r}") from None
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            s = uow.session
            sku = _resolve_sku(s, spec.gpu_sku)
            if s.get(TeamRow, spec.team) is None:
                raise ValidationError("team", f"unknown team {spec.team!r}")
            tenant_id = spec.tenant if spec.tenant is not None else _only_tenant(s, spec.team)
            tenant = s.get(TenantRow, tenant_id)
            if tenant is None:
                raise ValidationError("tenant", f"unknown tenant {tenant_id!r}")
            if tenant.team_id != spec.team:
                raise ValidationError("tenant", f"tenant {tenant_id!r} belongs to team {tenant.team_id!r}")
            per_gpu = max(spec.gpus, 1) / sku.gpus_per_node
            cpu = spec.cpu if spec.cpu is not None else round(sku.cpu_per_node * per_gpu, 3)
            mem_gb = spec.mem_gb if spec.mem_gb is not None else round(sku.mem_gb_per_node * per_gpu, 3)
            wid = self._ids.new("wl")
            s.add(
                WorkloadRow(
                    id=wid,
                    name=spec.name,
                    image=spec.image,
                    kind=spec.kind,
                    cpu=cpu,
                    mem_gb=mem_gb,
                    gpus=spec.gpus,
                    gpu_sku=sku.id,
                    min_replicas=spec.min_replicas,
                    max_replicas=max_replicas,
                    scale_metric=spec.scale_metric,
                    target_rps=spec.target_rps,
                    budget_cents_day=None if spec.budget_usd_day is None else int(spec.budget_usd_day * 100),
                    team_id=spec.team,
                    tenant_id=tenant_id,
                    priority=spec.priority,
                    checkpoint_interval_s=spec.checkpoint_interval_s,
                    version=1,
                    created_at_s=now_s,
                )
            )
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="workload.created",
                entity="workload",
                entity_id=wid,
                detail={"team": spec.team, "gpus": spec.gpus, "gpu_sku": sku.id, "name": spec.name},
            )
            uow.commit()
        return wid

    def get_row(
        self, uow: UnitOfWork, actor: Actor, workload_id: str, *, lock: Literal["key_share", "update"] | None = None
    ) -> WorkloadRow:
        """The workload's row (404, also for another team's to an app_team token). ``lock`` (PostgreSQL; SQLite
        serializes writers): a write that refers to the workload holds it until commit, ``key_share`` against a
        concurrent delete (which then waits, or has deleted it: 404), ``update`` for the delete itself (it waits for
        such writes)."""
        if lock is None:
            row = uow.session.get(WorkloadRow, workload_id)
        else:
            stmt = uow.lock(select(WorkloadRow).where(WorkloadRow.id == workload_id), key_share=lock == "key_share")
            row = uow.session.scalar(stmt)
        if row is None:
            raise NotFoundError("workload", workload_id)
        actor.require_owner(row.team_id, "workload", workload_id)
        return row

    def get_row_held(self, uow: UnitOfWork, actor: Actor, workload_id: str) -> WorkloadRow:
        """:meth:`get_row` held against a concurrent delete, for a write that refers to the workload."""
        return self.get_row(uow, actor, workload_id, lock="key_share")

    def get(self, actor: Actor, workload_id: str) -> dict[str, Any]:
        with UnitOfWork(self._engine, write=False) as uow:
            return workload_dict(self.get_row(uow, actor, workload_id))

    def list(self, actor: Actor, *, team: str | None, limit: int, offset: int) -> list[dict[str, Any]]:
        if actor.role is Role.APP_TEAM:
            if team is not None:
                actor.require_team(team)
            team = actor.team_id
        with UnitOfWork(self._engine, write=False) as uow:
            stmt = select(WorkloadRow).order_by(WorkloadRow.id).limit(limit).offset(offset)
            if team is not None:
                stmt = stmt.where(WorkloadRow.team_id == team)
            return [workload_dict(r) for r in uow.session.scalars(stmt).all()]

    def set_autoscaling(
        self,
        actor: Actor,
        workload_id: str,
        *,
        min_replicas: int,
        max_replicas: int,
        target_rps: float,
        expected_version: int | None,
        slo_s: float | None = None,
        max_concurrency: int | None = None,
    ) -> int:
        """Optimistic concurrency: a stale ``expected_version`` (or a concurrent writer) gets ConflictError."""
        actor.require(*WRITERS)
        if max_replicas < min_replicas:
            raise ValidationError("max", "must be >= min")
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            row = self.get_row(uow, actor, workload_id)
            seen = row.version
            if expected_version is not None and expected_version != seen:
                raise ConflictError(f"workload {workload_id} is at version {seen}, not {expected_version}")
            result = uow.session.execute(
                update(WorkloadRow)
                .where(WorkloadRow.id == workload_id, WorkloadRow.version == seen)
                .values(
                    min_replicas=min_replicas,
                    max_replicas=max_replicas,
                    target_rps=target_rps,
                    slo_s=slo_s,
                    max_concurrency=max_concurrency,
                    version=seen + 1,
                )
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise ConflictError(f"workload {workload_id} changed concurrently; re-read and retry")
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="workload.autoscaling_set",
                entity="workload",
                entity_id=workload_id,
                detail={
                    "min": min_replicas,
                    "max": max_replicas,
                    "target_rps": target_rps,
                    "slo_s": slo_s,
                    "max_concurrency": max_concurrency,
                    "version": seen + 1,
                },
            )
            uow.commit()
            return seen + 1

    def delete(self, actor: Actor, workload_id: str) -> None:
        """Remove a workload and its pending change requests (its utilization history stays for costs)."""
        actor.require(*WRITERS)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            # locked first: a change request being recorded commits before its list is read (else its FK fails)
            row = self.get_row(uow, actor, workload_id, lock="update")
            for change in uow.session.scalars(
                select(RightsizingChangeRow).where(RightsizingChangeRow.workload_id == workload_id)
            ).all():
                uow.session.delete(change)
            uow.session.delete(row)
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="workload.deleted",
                entity="workload",
                entity_id=workload_id,
                detail={"team": row.team_id},
            )
            uow.commit()

    def request_rightsizing(self, actor: Actor, workload_id: str, *, cpu: float, mem_gb: float, ticket: str) -> str:
        """Record a rightsizing change request (applied by the deploy pipeline); returns its change id."""
        actor.require(*WRITERS)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            self.get_row_held(uow, actor, workload_id)
            cid = self._ids.new("chg")
            uow.session.add(
                RightsizingChangeRow(
                    id=cid,
                    workload_id=workload_id,
                    cpu=cpu,
                    mem_gb=mem_gb,
                    ticket=ticket,
                    status="pending",
                    requested_by=actor.user_id,
                    created_at_s=now_s,
                )
            )
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="workload.rightsizing_requested",
                entity="workload",
                entity_id=workload_id,
                detail={"change_id": cid, "cpu": cpu, "mem_gb": mem_gb, "ticket": ticket},
            )
            uow.commit()
            return cid
