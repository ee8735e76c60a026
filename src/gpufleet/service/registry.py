"""CRUD for the registries: SKUs, providers, regions, capacity pools, clusters, nodes, teams, tenants.

Values arrive already shape-checked by the API schemas; this layer checks what needs the store: references
exist (``ValidationError`` naming the field), ids are unique (``ConflictError``), nothing still referenced is
deleted (``ConflictError``). Every write is audited. Admins write; every authenticated role reads.

A node's allocations fit its ``gpus_total`` and name each workload once, after a PATCH as after a create. A pool
is not deleted while utilization records (its past costs) or budget commitments that have not ended name it
(no foreign key guards them); its placement signal, if any, is deleted with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase

from gpufleet.adapters.kubernetes.usage import cluster_id_problem
from gpufleet.adapters.sql.models import (
    BudgetCommitmentRow,
    ClusterRow,
    NodeRow,
    PlacementVictimRow,
    PoolPriceRow,
    PoolRow,
    PoolSignalRow,
    ProviderRow,
    RegionRow,
    SkuRow,
    TeamRow,
    TenantRow,
    UtilizationRow,
)
from gpufleet.domain.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.domain.money import price_to_uusd, uusd_to_usd
from gpufleet.service.auth import ADMINS, Actor
from gpufleet.service.clock import Clock
from gpufleet.service.pool_prices import record_price_change
from gpufleet.service.uow import UnitOfWork

Row = dict[str, Any]


def _pool_in(values: Row) -> Row:
    out = {k: v for k, v in values.items() if v is not None or k == "quota_gpus"}
    if "price_usd_per_gpu_h" in out:
        out["price_uusd_per_gpu_h"] = price_to_uusd(out.pop("price_usd_per_gpu_h"))
    return out


def _pool_out(values: Row) -> Row:
    out = dict(values)
    out["price_usd_per_gpu_h"] = uusd_to_usd(out.pop("price_uusd_per_gpu_h"))
    return out


def _node_in(values: Row) -> Row:
    out = dict(values)
    if "allocations" in out:
        out["allocations_json"] = json.dumps(out.pop("allocations"), sort_keys=True)
    return out


def _node_out(values: Row) -> Row:
    out = dict(values)
    out["allocations"] = json.loads(out.pop("allocations_json"))
    return out


def _same(values: Row) -> Row:
    return dict(values)


def _check_node(node: Row) -> None:
    """A node's allocations (as stored, after the write) name each workload once and fit its GPUs."""
    seen: set[str] = set()
    for i, a in enumerate(node["allocations"]):
        if a["workload_id"] in seen:
            raise ValidationError(f"allocations[{i}].workload_id", f"workload {a['workload_id']!r} is listed twice")
        seen.add(a["workload_id"])
    used = sum(a["gpus"] for a in node["allocations"])
    if used > node["gpus_total"]:
        raise ValidationError("allocations", f"allocate {used} GPUs; node {node['id']!r} has {node['gpus_total']}")


def _no_check(values: Row) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    model: type[DeclarativeBase]
    refs: Mapping[str, type[DeclarativeBase]] = field(default_factory=dict)
    to_row: Callable[[Row], Row] = _same
    from_row: Callable[[Row], Row] = _same
    check: Callable[[Row], None] = _no_check  # what the stored row must be after a create or an update


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("sku", SkuRow),
        Kind("provider", ProviderRow),
        Kind("region", RegionRow, {"provider_id": ProviderRow}),
        Kind(
            "pool",
            PoolRow,
            {"provider_id": ProviderRow, "region_id": RegionRow, "sku_id": SkuRow},
            _pool_in,
            _pool_out,
        ),
        Kind("cluster", ClusterRow, {"region_id": RegionRow}),
        Kind("node", NodeRow, {"cluster_id": ClusterRow, "sku_id": SkuRow}, _node_in, _node_out, _check_node),
        Kind("team", TeamRow),
        Kind("tenant", TenantRow, {"team_id": TeamRow}),
    )
}


def _columns(row: DeclarativeBase) -> Row:
    return {c.key: getattr(row, c.key) for c in row.__table__.columns}


class RegistryService:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    def create(self, actor: Actor, kind: str, values: Row) -> Row:
        actor.require(*ADMINS)
        k = KINDS[kind]
        with UnitOfWork(self._engine, write=True) as uow:
            if uow.session.get(k.model, values["id"]) is not None:
                raise ConflictError(f"{kind} {values['id']!r} already exists")
            if kind == "cluster" and (problem := cluster_id_problem(str(values["id"]))) is not None:
                raise ValidationError("id", f"cluster id {values['id']!r} {problem}")
            self._check_refs(uow, k, values)
            row = k.model(**k.to_row(values))
            k.check(k.from_row(_columns(row)))
            uow.session.add(row)
            self._audit(uow, actor, f"{kind}.created", kind, values["id"], values)
            self._flush(uow, kind, values["id"])
            out = k.from_row(_columns(row))
            uow.commit()
            return out

    def update(self, actor: Actor, kind: str, ident: str, values: Row) -> Row:
        actor.require(*ADMINS)
        k = KINDS[kind]
        with UnitOfWork(self._engine, write=True) as uow:
            # locked: two price changes of one pool are kept one after the other in its price history
            row = uow.session.scalar(uow.lock(select(k.model).where(k.model.__table__.c.id == ident)))
            if row is None:
                raise NotFoundError(kind, ident)
            self._check_refs(uow, k, values)
            new = k.to_row(values)
            if isinstance(row, PoolRow) and "price_uusd_per_gpu_h" in new:
                record_price_change(uow, ident, row.price_uusd_per_gpu_h, new["price_uusd_per_gpu_h"],
                                    self._clock.now_s())  # fmt: skip
            for key, value in new.items():
                setattr(row, key, value)
            k.check(k.from_row(_columns(row)))
            self._audit(uow, actor, f"{kind}.updated", kind, ident, values)
            self._flush(uow, kind, ident)
            out = k.from_row(_columns(row))
            uow.commit()
            return out

    def delete(self, actor: Actor, kind: str, ident: str) -> None:
        actor.require(*ADMINS)
        k = KINDS[kind]
        with UnitOfWork(self._engine, write=True) as uow:
            # locked: a concurrent write naming the pool (ingest locks the pools it names) commits first or fails
            row = uow.session.scalar(uow.lock(select(k.model).where(k.model.__table__.c.id == ident)))
            if row is None:
                raise NotFoundError(kind, ident)
            detail = self._delete_pool_dependents(uow, ident) if kind == "pool" else {}
            uow.session.delete(row)
            self._audit(uow, actor, f"{kind}.deleted", kind, ident, detail)
            try:
                uow.session.flush()
            except IntegrityError:
                raise ConflictError(f"{kind} {ident!r} is still referenced; delete its dependents first") from None
            uow.commit()

    def _delete_pool_dependents(self, uow: UnitOfWork, pool_id: str) -> Row:
        """Refuse (ConflictError) while records name the pool: utilization (deleting the pool would re-price the
        costs already incurred in it) or a budget commitment that has not ended. Delete the pool's placement
        signal, which is the pool's own state; returns it for the audit event."""
        s = uow.session
        used = s.scalar(select(func.count()).select_from(UtilizationRow).where(UtilizationRow.pool_id == pool_id))
        committed = s.scalar(
            select(func.count())
            .select_from(BudgetCommitmentRow)
            .where(BudgetCommitmentRow.pool_id == pool_id, BudgetCommitmentRow.end_s > self._clock.now_s())
        )
        refs = [
            f"{n} {what}" for n, what in ((used, "utilization record(s)"), (committed, "budget commitment(s)")) if n
        ]
        if refs:
            raise ConflictError(
                f"pool {pool_id!r} is still named by {' and '.join(refs)}; deleting it would charge what was "
                "recorded in it elsewhere"
            )
        s.execute(delete(PoolPriceRow).where(PoolPriceRow.pool_id == pool_id))  # nothing is priced in it any more
        s.execute(delete(PlacementVictimRow).where(PlacementVictimRow.pool_id == pool_id))  # no work runs there now
        signal = s.get(PoolSignalRow, pool_id)
        if signal is None:
            return {}
        s.execute(delete(PoolSignalRow).where(PoolSignalRow.pool_id == pool_id))
        return {"signal_deleted": {"stockout": signal.stockout, "queue_wait_s": signal.queue_wait_s}}

    def get(self, actor: Actor, kind: str, ident: str) -> Row:
        k = KINDS[kind]
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.get(k.model, ident)
            if row is None:
                raise NotFoundError(kind, ident)
            return k.from_row(_columns(row))

    def list(self, actor: Actor, kind: str, *, limit: int, offset: int, filters: Row | None = None) -> list[Row]:
        k = KINDS[kind]
        with UnitOfWork(self._engine, write=False) as uow:
            pk = k.model.__table__.c.id
            stmt = select(k.model).order_by(pk).limit(limit).offset(offset)
            for key, value in (filters or {}).items():
                if value is not None:
                    stmt = stmt.where(k.model.__table__.c[key] == value)
            return [k.from_row(_columns(r)) for r in uow.session.scalars(stmt).all()]

    def _check_refs(self, uow: UnitOfWork, k: Kind, values: Row) -> None:
        for key, model in k.refs.items():
            if key in values and values[key] is not None and uow.session.get(model, values[key]) is None:
                raise ValidationError(key, f"unknown {key.removesuffix('_id')} {values[key]!r}")

    def _flush(self, uow: UnitOfWork, kind: str, ident: str) -> None:
        try:
            uow.session.flush()
        except IntegrityError:
            raise ConflictError(f"{kind} {ident!r} conflicts with an existing record") from None

    def _audit(self, uow: UnitOfWork, actor: Actor, action: str, kind: str, ident: str, values: Row) -> None:
        detail = {k: (str(v) if isinstance(v, Decimal) else v) for k, v in values.items()}
        uow.audit(
            at_s=self._clock.now_s(), actor=actor.user_id, action=action, entity=kind, entity_id=ident, detail=detail
        )
