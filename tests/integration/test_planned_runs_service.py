"""The planned-run calendar's use case (service/planned_runs.py) and what the procurement context reads of it
(service/procurement.py), called directly on a migrated store (SQLite, and PostgreSQL when reachable)."""

from __future__ import annotations

import json
import math
import threading

import pytest
from sqlalchemy import select

from gpufleet.adapters.sql.models import AuditEventRow, PoolRow, ReservationRow, TeamRow
from gpufleet.domain.errors import NotFoundError, PermissionDenied, ValidationError
from gpufleet.ports import PlannedRunRegistration
from gpufleet.service.auth import Actor, Role
from gpufleet.service.capacity import CapacityService
from gpufleet.service.clock import FixedClock, SequentialIds
from gpufleet.service.planned_runs import RESERVED_AHEAD, PlannedRunService, PlannedRunSpec
from gpufleet.service.procurement import ProcurementService, on_demand_quota
from gpufleet.service.uow import UnitOfWork
from tests.integration.conftest import NOW_S, Database

DAY = 86_400
SKU = "h100_80gb"
REGION = "us-east-1"
ADMIN = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
FINOPS = Actor("fay", Role.FINOPS_ADMIN, None)
ANN = Actor("ann", Role.APP_TEAM, "team-p")
VIC = Actor("vic", Role.VIEWER, None)


def _spec(**change: object) -> PlannedRunSpec:
    base: dict[str, object] = {
        "name": "pretrain-7b", "team": "team-p", "sku": SKU, "region": REGION, "gpus": 64,
        "start_s": NOW_S + 20 * DAY, "duration_s": 14 * DAY, "probability": 0.8,
    }  # fmt: skip
    return PlannedRunSpec(**{**base, **change})  # type: ignore[arg-type]


@pytest.fixture
def calendar(database: Database) -> tuple[PlannedRunService, FixedClock]:
    with UnitOfWork(database.engine, write=True) as uow:
        uow.session.add_all([TeamRow(id="team-p", name="P"), TeamRow(id="team-q", name="Q")])
        uow.commit()
    clock = FixedClock(NOW_S)
    return PlannedRunService(database.engine, clock, SequentialIds()), clock


def _events(database: Database, entity_id: str) -> list[tuple[str, str, dict[str, object]]]:
    with UnitOfWork(database.engine, write=False) as uow:
        rows = uow.session.scalars(
            select(AuditEventRow).where(AuditEventRow.entity_id == entity_id).order_by(AuditEventRow.id)
        ).all()
        return [(r.action, r.actor, json.loads(r.detail_json)) for r in rows]


def test_register_stores_the_run_as_sent_with_the_server_clock_and_audits_it(
    database: Database, calendar: tuple[PlannedRunService, FixedClock]
) -> None:
    svc, _clock = calendar
    run = svc.register(ANN, _spec())
    assert run == {
        "id": "run_000001", "name": "pretrain-7b", "team": "team-p", "sku": SKU, "region": REGION, "gpus": 64,
        "start_s": NOW_S + 20 * DAY, "duration_s": 14 * DAY, "end_s": NOW_S + 34 * DAY, "probability": 0.8,
        "registered_s": NOW_S, "created_by": "ann", "status": "scheduled", "active": True,
        "cancelled_at_s": None, "cancelled_by": None, "reserved_ahead": [],
    }  # fmt: skip
    assert svc.get(VIC, run["id"]) == run
    ((action, actor, detail),) = _events(database, run["id"])
    assert action == "planned_run.registered" and actor == "ann" and detail["gpus"] == 64


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": -8}, "gpus"),
        ({"gpus": True}, "gpus"),
        ({"duration_s": 0}, "duration_s"),
        ({"probability": 0.0}, "probability"),
        ({"probability": 1.5}, "probability"),
        ({"probability": math.nan}, "probability"),
        ({"start_s": NOW_S}, "start_s"),  # now is not the future
        ({"start_s": NOW_S - DAY}, "start_s"),
        ({"name": ""}, "name"),
        ({"name": "a\nb"}, "name"),
        ({"team": "nobody"}, "team"),
        ({"sku": "zz9"}, "sku"),
        ({"region": "mars-1"}, "region"),
        ({"region": "eu-north1"}, "region"),  # known, but no reserved pool of the SKU there
    ],
)
def test_register_refuses_a_bad_field_naming_it(
    calendar: tuple[PlannedRunService, FixedClock], change: dict[str, object], field: str
) -> None:
    svc, _ = calendar
    with pytest.raises(ValidationError) as err:
        svc.register(ADMIN, _spec(**change))
    assert err.value.field == field
    assert svc.list(ADMIN) == []


def test_roles_admins_for_any_team_app_team_for_its_own_viewer_reads_only(
    calendar: tuple[PlannedRunService, FixedClock],
) -> None:
    svc, _ = calendar
    with pytest.raises(PermissionDenied):
        svc.register(VIC, _spec())
    with pytest.raises(PermissionDenied):
        svc.register(ANN, _spec(team="team-q"))
    own = svc.register(ANN, _spec())
    other = svc.register(FINOPS, _spec(team="team-q"))
    assert svc.register(ADMIN, _spec(team="team-q", name="other"))["team"] == "team-q"
    assert [r["id"] for r in svc.list(ANN)] == [own["id"]]  # an app team sees its own team only
    with pytest.raises(PermissionDenied):
        svc.list(ANN, team="team-q")
    with pytest.raises(NotFoundError):  # another team's run by id: as if it did not exist
        svc.get(ANN, other["id"])
    with pytest.raises(NotFoundError):
        svc.cancel(ANN, other["id"])
    with pytest.raises(PermissionDenied):
        svc.cancel(VIC, own["id"])
    assert len(svc.list(VIC)) == 3 and svc.get(VIC, other["id"])["active"] is True
    with pytest.raises(NotFoundError):
        svc.get(VIC, "run_nope")
    with pytest.raises(NotFoundError):
        svc.cancel(ADMIN, "run_nope")


def test_cancel_is_idempotent_frees_the_name_and_filters_apply(
    database: Database, calendar: tuple[PlannedRunService, FixedClock]
) -> None:
    svc, clock = calendar
    run = svc.register(ANN, _spec())
    with pytest.raises(ValidationError) as dup:
        svc.register(ADMIN, _spec(gpus=8))
    assert dup.value.field == "name"
    assert svc.register(ADMIN, _spec(team="team-q"))["name"] == run["name"]  # unique per team only
    clock.advance(60)
    first = svc.cancel(ANN, run["id"])
    assert first["status"] == "cancelled" and first["active"] is False
    assert first["cancelled_at_s"] == NOW_S + 60 and first["cancelled_by"] == "ann"
    clock.advance(60)
    assert svc.cancel(ADMIN, run["id"]) == first  # unchanged, not re-cancelled by bob
    assert [a for a, _, _ in _events(database, run["id"])] == ["planned_run.registered", "planned_run.cancelled"]
    again = svc.register(ANN, _spec())  # the name is free once the run is cancelled
    assert again["id"] != run["id"]
    assert [r["id"] for r in svc.list(ADMIN, team="team-p", active=False)] == [run["id"]]
    assert [r["id"] for r in svc.list(ADMIN, team="team-p", active=True)] == [again["id"]]
    assert len(svc.list(ADMIN, sku=SKU)) == 3 and svc.list(ADMIN, sku="a100_80gb") == []
    assert len(svc.list(ADMIN, limit=1, offset=2)) == 1


def test_status_follows_the_service_clock(calendar: tuple[PlannedRunService, FixedClock]) -> None:
    svc, clock = calendar
    run = svc.register(ANN, _spec(start_s=NOW_S + DAY, duration_s=DAY))
    clock.set(NOW_S + DAY)
    assert svc.get(ANN, run["id"])["status"] == "running"
    clock.set(NOW_S + 2 * DAY)
    assert svc.get(ANN, run["id"])["status"] == "ended"


def test_the_procurement_context_reads_the_active_not_started_runs_of_its_sku_region(
    database: Database, calendar: tuple[PlannedRunService, FixedClock]
) -> None:
    """What ProcurementService.planned_runs passes to the procurer: the SKU-region's runs not cancelled and not
    started, as ports.PlannedRunRegistration, registered at the start of today at the latest."""
    svc, clock = calendar
    clock.set(NOW_S + 3600)  # 01:00: today's passes see the day as starting at NOW_S
    kept = svc.register(ANN, _spec())
    gone = svc.register(ANN, _spec(name="cancelled"))
    svc.cancel(ANN, gone["id"])
    soon = svc.register(ANN, _spec(name="soon", start_s=NOW_S + 2 * 3600, duration_s=DAY))
    svc.register(ADMIN, _spec(team="team-q", name="a100", sku="a100_80gb"))  # another SKU
    procurement = ProcurementService(database.engine, clock, CapacityService(database.engine, clock), None)  # type: ignore[arg-type]
    got = procurement.planned_runs(SKU, REGION, NOW_S)
    assert [rid for rid, _ in got] == [soon["id"], kept["id"]]
    assert got[1][1] == PlannedRunRegistration(
        name="pretrain-7b", team="team-p", sku_id=SKU, gpus=64, start_s=NOW_S + 20 * DAY, duration_s=14 * DAY,
        probability=0.8, registered_s=NOW_S,
    )  # fmt: skip
    assert [rid for rid, _ in procurement.planned_runs(SKU, REGION, NOW_S + DAY)] == [kept["id"]]  # started: out
    assert procurement.planned_runs(SKU, "us-west-2", NOW_S) == []


def test_tier_limits_carry_the_on_demand_quota_of_the_stored_pools(database: Database) -> None:
    clock = FixedClock(NOW_S)
    procurement = ProcurementService(database.engine, clock, CapacityService(database.engine, clock), None)  # type: ignore[arg-type]
    assert math.isinf(procurement.tier_limits([SKU])[SKU].on_demand_quota_gpus)  # no quota stored: no ceiling
    with UnitOfWork(database.engine, write=True) as uow:
        uow.session.get_one(PoolRow, f"aws/{REGION}/{SKU}/on_demand").quota_gpus = 48
        uow.session.get_one(PoolRow, f"nebius/eu-north1/{SKU}/spot").quota_gpus = 16
        uow.commit()
    limits = procurement.tier_limits([SKU])[SKU]
    assert limits.on_demand_quota_gpus == 48.0 and limits.spot_capacity_gpus == 16.0
    assert limits.secondary_capacity_gpus == 0.0


def test_on_demand_quota_sums_stated_quotas_and_is_unbounded_when_one_is_unknown() -> None:
    assert on_demand_quota([("on_demand", 16), ("on_demand", 32), ("spot", 8)]) == 48.0
    assert math.isinf(on_demand_quota([("on_demand", 16), ("on_demand", None)]))
    assert math.isinf(on_demand_quota([("spot", 8)]))
    assert on_demand_quota([("on_demand", 0)]) == 0.0


@pytest.mark.parametrize("check", [True, False], ids=["checked", "index_only"])
def test_concurrent_registrations_of_one_name_leave_one_active_run(
    database: Database, calendar: tuple[PlannedRunService, FixedClock], check: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight registrations of the same team and name at once: one is stored, the others are refused naming
    ``name`` (the check under the write transaction, and the partial unique index where the check races; with
    the check switched off the index alone holds)."""
    if not check:
        monkeypatch.setattr(PlannedRunService, "_name_taken", staticmethod(lambda *_: False))
    svc = PlannedRunService(database.engine, FixedClock(NOW_S))  # random ids: no shared sequence across threads
    results: list[object] = []

    def register(i: int) -> None:
        try:
            results.append(svc.register(ADMIN, _spec(gpus=8 * (i + 1))))
        except ValidationError as exc:
            results.append(exc)

    threads = [threading.Thread(target=register, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    stored = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, ValidationError)]
    assert len(stored) == 1 and len(refused) == 7 and all(e.field == "name" for e in refused), results
    assert [r["id"] for r in svc.list(ADMIN, active=True)] == [stored[0]["id"]]


def test_a_reservation_bought_ahead_twice_is_listed_once(
    database: Database, calendar: tuple[PlannedRunService, FixedClock]
) -> None:
    """Two passes that replay one idempotent order each link it to the run (two audit events): the run lists the
    reservation once, with its status now, and a link to a reservation that does not exist is not listed."""
    svc, _clock = calendar
    run = svc.register(ANN, _spec())
    with UnitOfWork(database.engine, write=True) as uow:
        uow.session.add(
            ReservationRow(
                id="res_a",
                pool_id=f"aws/{REGION}/{SKU}/reserved",
                sku_id=SKU,
                region_id=REGION,
                units=64,
                start_s=NOW_S + 14 * DAY,
                term_months=12,
                price_uusd_per_gpu_h=4_361_900,
                est_cost_cents=1,
                status="submitted",
                approvals_required=2,
                created_by="reconciler",
                created_at_s=NOW_S,
                idempotency_key="k-a",
            )
        )
        for res in ("res_a", "res_a", "res_gone"):
            uow.audit(at_s=NOW_S, actor="reconciler", action=RESERVED_AHEAD, entity="planned_run",
                      entity_id=run["id"], detail={"reservation_id": res, "units": 64})  # fmt: skip
        uow.commit()
    ahead = [{"reservation_id": "res_a", "units": 64, "start_s": NOW_S + 14 * DAY, "status": "submitted_to_cloud"}]
    assert svc.get(ANN, run["id"])["reserved_ahead"] == ahead
    assert [r["reserved_ahead"] for r in svc.list(VIC)] == [ahead]
    assert svc.cancel(ANN, run["id"])["reserved_ahead"] == ahead
