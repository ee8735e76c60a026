"""The planned-run calendar: a team registers a large training run ahead of time (name, SKU, region, GPUs,
start, duration, how likely it is to go ahead), and the loop's procurer reserves ahead of it
(``control/planned_runs.py``: :class:`~gpufleet.control.planned_runs.PlannedRunReserve`, the simulator's decision),
through :meth:`gpufleet.service.procurement.ProcurementService.context`.

Who may do what: admins (``finops_admin``, ``ml_platform_admin``) register and cancel for any team; an ``app_team``
token for its own team only, and it reads only its own team's runs; a ``viewer`` reads every run and writes
nothing. Every registration and cancellation is appended to the audit log in the same transaction.

Rules (each refusal names its field): ``gpus`` > 0, ``duration_s`` > 0, 0 < ``probability`` <= 1, ``start_s`` after
the service clock's now, a known team, SKU and region, a reserved pool of the SKU in the region (where the
procurer would buy), a name unique among the team's runs that are not cancelled, and at most ``MAX_RUNS_PER_TEAM``
(50) runs to come per team (not cancelled, not started; the 51st is refused naming ``team``). Cancelling keeps the row
(``cancelled_at_s``); a cancelled run no longer counts. Cancelling a cancelled run changes nothing (idempotent).

Whether a run was covered: each reservation the loop's procurer bought ahead of runs is linked to each of them by an
audit event ``planned_run.reserved_ahead`` (entity the run, written with the reservation,
``ProcurementService.commit``), and every view of a run lists them as ``reserved_ahead`` with the reservation's status
now. Cancelling a run does not cancel them: they stay listed, for an admin to decide.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Engine, and_, func, select
from sqlalchemy.exc import IntegrityError

from gpufleet.adapters.sql.models import (
    AuditEventRow,
    PlannedRunRow,
    PoolRow,
    RegionRow,
    ReservationRow,
    SkuRow,
    TeamRow,
)
from gpufleet.domain.errors import NotFoundError, ValidationError
from gpufleet.domain.pools import Tier
from gpufleet.ports import PlannedRunRegistration
from gpufleet.service.auth import ADMINS, Actor, Role
from gpufleet.service.clock import Clock, IdGenerator, RandomIds
from gpufleet.service.uow import UnitOfWork

WRITERS = (*ADMINS, Role.APP_TEAM)
READERS = (*ADMINS, Role.APP_TEAM, Role.VIEWER)
MAX_GPUS = 1_000_000
MAX_DURATION_S = 5 * 366 * 86_400
# runs to come (not cancelled, not started) per team: the procurement decision weighs every run to come of its
# SKU-region (control/planned_runs.py), ~0.4 s for 50 distinct overlapping runs and 7-13 s for 200
MAX_RUNS_PER_TEAM = 50
RESERVED_AHEAD = "planned_run.reserved_ahead"  # audit action linking a run to a reservation bought ahead of it


@dataclass(frozen=True, slots=True)
class PlannedRunSpec:
    """A registration as sent."""

    name: str
    team: str
    sku: str
    region: str
    gpus: int
    start_s: int
    duration_s: int
    probability: float = 1.0


def run_status(row: PlannedRunRow, now_s: int) -> str:
    """``cancelled``, ``scheduled`` (not started), ``running`` or ``ended`` by the service clock."""
    if row.cancelled_at_s is not None:
        return "cancelled"
    if now_s < row.start_s:
        return "scheduled"
    return "running" if now_s < row.start_s + row.duration_s else "ended"


def public_status(status: str) -> str:
    """A reservation's status as the API names it (``submitted`` is ``submitted_to_cloud``)."""
    return "submitted_to_cloud" if status == "submitted" else status


def reserved_ahead(uow: UnitOfWork, run_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """The reservations bought ahead of each run (audit events :data:`RESERVED_AHEAD`, oldest first), each with its
    units, start and status now; runs with none are absent."""
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    links = [
        (run_id, str(json.loads(detail)["reservation_id"]))
        for run_id, detail in uow.session.execute(
            select(AuditEventRow.entity_id, AuditEventRow.detail_json)
            .where(AuditEventRow.action == RESERVED_AHEAD, AuditEventRow.entity_id.in_(ids))
            .order_by(AuditEventRow.id)
        ).all()
    ]
    rows = {
        r.id: r
        for r in uow.session.scalars(select(ReservationRow).where(ReservationRow.id.in_({res for _, res in links})))
    }
    out: dict[str, list[dict[str, Any]]] = {}
    for run_id, res in dict.fromkeys(links):  # once each: two passes may both replay one idempotent order
        if (r := rows.get(res)) is not None:
            out.setdefault(run_id, []).append(
                {"reservation_id": r.id, "units": r.units, "start_s": r.start_s, "status": public_status(r.status)}
            )
    return out


def planned_run_dict(row: PlannedRunRow, now_s: int, ahead: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "team": row.team_id,
        "sku": row.sku_id,
        "region": row.region_id,
        "gpus": row.gpus,
        "start_s": row.start_s,
        "duration_s": row.duration_s,
        "end_s": row.start_s + row.duration_s,
        "probability": row.probability,
        "registered_s": row.registered_s,
        "created_by": row.created_by,
        "status": run_status(row, now_s),
        "active": row.cancelled_at_s is None,
        "cancelled_at_s": row.cancelled_at_s,
        "cancelled_by": row.cancelled_by,
        "reserved_ahead": list(ahead),
    }


def registration(row: PlannedRunRow) -> PlannedRunRegistration:
    """A stored run as the procurer reads it (``ports.PlannedRunRegistration``; the region is the context's)."""
    return PlannedRunRegistration(
        name=row.name,
        team=row.team_id,
        sku_id=row.sku_id,
        gpus=int(row.gpus),
        start_s=int(row.start_s),
        duration_s=int(row.duration_s),
        probability=float(row.probability),
        registered_s=int(row.registered_s),
    )


def to_come(after_s: int) -> ColumnElement[bool]:
    """The runs a procurement pass reads: not cancelled and starting after ``after_s``."""
    return and_(PlannedRunRow.cancelled_at_s.is_(None), PlannedRunRow.start_s > after_s)


def active_runs(uow: UnitOfWork, sku_id: str, region_id: str, after_s: int) -> Sequence[PlannedRunRow]:
    """The SKU-region's runs :func:`to_come` after ``after_s``, by start then id."""
    return uow.session.scalars(
        select(PlannedRunRow)
        .where(PlannedRunRow.sku_id == sku_id, PlannedRunRow.region_id == region_id, to_come(after_s))
        .order_by(PlannedRunRow.start_s, PlannedRunRow.id)
    ).all()


def _check(spec: PlannedRunSpec, now_s: int) -> None:
    if not spec.name or len(spec.name) > 200 or any(ord(c) < 32 or ord(c) == 127 for c in spec.name):
        raise ValidationError("name", "must be 1..200 characters without control characters")
    if isinstance(spec.gpus, bool) or not 0 < spec.gpus <= MAX_GPUS:
        raise ValidationError("gpus", f"must be in 1..{MAX_GPUS}, got {spec.gpus}")
    if isinstance(spec.duration_s, bool) or not 0 < spec.duration_s <= MAX_DURATION_S:
        raise ValidationError("duration_s", f"must be in 1..{MAX_DURATION_S} seconds, got {spec.duration_s}")
    p = spec.probability
    if isinstance(p, bool) or not (math.isfinite(p) and 0.0 < p <= 1.0):
        raise ValidationError("probability", f"must be in (0, 1], got {p}")
    if spec.start_s <= now_s:
        raise ValidationError("start_s", f"must be in the future (after {now_s}), got {spec.start_s}")


class PlannedRunService:
    def __init__(self, engine: Engine, clock: Clock, ids: IdGenerator | None = None) -> None:
        self._engine = engine
        self._clock = clock
        self._ids: IdGenerator = ids or RandomIds()

    def register(self, actor: Actor, spec: PlannedRunSpec) -> dict[str, Any]:
        """Register a run (module docstring for the rules); returns it as stored."""
        actor.require(*WRITERS)
        actor.require_team(spec.team)
        now_s = self._clock.now_s()
        _check(spec, now_s)
        with UnitOfWork(self._engine, write=True) as uow:
            s = uow.session
            if s.get(TeamRow, spec.team) is None:
                raise ValidationError("team", f"unknown team {spec.team!r}")
            if s.get(SkuRow, spec.sku) is None:
                raise ValidationError("sku", f"unknown SKU {spec.sku!r}")
            if s.get(RegionRow, spec.region) is None:
                raise ValidationError("region", f"unknown region {spec.region!r}")
            reserved = s.scalar(
                select(PoolRow.id)
                .where(
                    PoolRow.sku_id == spec.sku, PoolRow.region_id == spec.region, PoolRow.tier == Tier.RESERVED.value
                )
                .limit(1)
            )
            if reserved is None:
                raise ValidationError(
                    "region",
                    f"no reserved pool of {spec.sku!r} in {spec.region!r}: nothing to reserve ahead of the run",
                )
            uow.serialize("planned_run_team", [spec.team])  # two registrations cannot both take the last place
            if self._name_taken(uow, spec.team, spec.name):
                raise ValidationError("name", f"team {spec.team!r} already has an active planned run {spec.name!r}")
            to_come_n = s.scalar(select(func.count()).where(PlannedRunRow.team_id == spec.team, to_come(now_s)))
            if int(to_come_n or 0) >= MAX_RUNS_PER_TEAM:
                raise ValidationError(
                    "team",
                    f"team {spec.team!r} already has {MAX_RUNS_PER_TEAM} planned runs to come, the most a team may "
                    "register; cancel one (or wait for one to start) first",
                )
            rid = self._ids.new("run")
            row = PlannedRunRow(
                id=rid,
                name=spec.name,
                team_id=spec.team,
                sku_id=spec.sku,
                region_id=spec.region,
                gpus=spec.gpus,
                start_s=spec.start_s,
                duration_s=spec.duration_s,
                probability=float(spec.probability),
                registered_s=now_s,
                created_by=actor.user_id,
                cancelled_at_s=None,
                cancelled_by=None,
            )
            s.add(row)
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="planned_run.registered",
                entity="planned_run",
                entity_id=rid,
                detail={"team": spec.team, "name": spec.name, "sku": spec.sku, "region": spec.region,
                        "gpus": spec.gpus, "start_s": spec.start_s, "duration_s": spec.duration_s,
                        "probability": spec.probability},
            )  # fmt: skip
            try:
                uow.commit()
            except IntegrityError:  # a concurrent registration of the same name won the race
                raise ValidationError(
                    "name", f"team {spec.team!r} already has an active planned run {spec.name!r}"
                ) from None
            return planned_run_dict(row, now_s)

    @staticmethod
    def _name_taken(uow: UnitOfWork, team: str, name: str) -> bool:
        return (
            uow.session.scalar(
                select(PlannedRunRow.id)
                .where(
                    PlannedRunRow.team_id == team, PlannedRunRow.name == name, PlannedRunRow.cancelled_at_s.is_(None)
                )
                .limit(1)
            )
            is not None
        )

    def _row(self, uow: UnitOfWork, actor: Actor, run_id: str) -> PlannedRunRow:
        row = uow.session.get(PlannedRunRow, run_id)
        if row is None:
            raise NotFoundError("planned run", run_id)
        actor.require_owner(row.team_id, "planned run", run_id)
        return row

    def get(self, actor: Actor, run_id: str) -> dict[str, Any]:
        actor.require(*READERS)
        with UnitOfWork(self._engine, write=False) as uow:
            row = self._row(uow, actor, run_id)
            return planned_run_dict(row, self._clock.now_s(), reserved_ahead(uow, [run_id]).get(run_id, ()))

    def list(
        self,
        actor: Actor,
        *,
        team: str | None = None,
        sku: str | None = None,
        active: bool | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Runs by start then id; ``active``: True = not cancelled, False = cancelled, None = both. An app_team
        token sees only its own team's runs (naming another team is a 403)."""
        actor.require(*READERS)
        if actor.role is Role.APP_TEAM:
            if team is not None:
                actor.require_team(team)
            team = actor.team_id
        stmt = select(PlannedRunRow).order_by(PlannedRunRow.start_s, PlannedRunRow.id).limit(limit).offset(offset)
        if team is not None:
            stmt = stmt.where(PlannedRunRow.team_id == team)
        if sku is not None:
            stmt = stmt.where(PlannedRunRow.sku_id == sku)
        if active is True:
            stmt = stmt.where(PlannedRunRow.cancelled_at_s.is_(None))
        elif active is False:
            stmt = stmt.where(PlannedRunRow.cancelled_at_s.is_not(None))
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=False) as uow:
            rows = uow.session.scalars(stmt).all()
            ahead = reserved_ahead(uow, (r.id for r in rows))
            return [planned_run_dict(r, now_s, ahead.get(r.id, ())) for r in rows]

    def cancel(self, actor: Actor, run_id: str) -> dict[str, Any]:
        """Cancel a run: it no longer counts from the next procurement decision on. Cancelling a cancelled run
        returns it unchanged (no second audit event)."""
        actor.require(*WRITERS)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            row = uow.session.execute(uow.lock(select(PlannedRunRow).where(PlannedRunRow.id == run_id))).scalar()
            if row is None:
                raise NotFoundError("planned run", run_id)
            actor.require_owner(row.team_id, "planned run", run_id)
            ahead = reserved_ahead(uow, [run_id]).get(run_id, ())
            if row.cancelled_at_s is not None:
                return planned_run_dict(row, now_s, ahead)
            before = run_status(row, now_s)
            row.cancelled_at_s = now_s
            row.cancelled_by = actor.user_id
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="planned_run.cancelled",
                entity="planned_run",
                entity_id=run_id,
                detail={"team": row.team_id, "name": row.name, "status_before": before},
            )
            uow.commit()
            return planned_run_dict(row, now_s, ahead)
