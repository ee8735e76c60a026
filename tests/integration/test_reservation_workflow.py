"""The reservation workflow over HTTP on SQLite and PostgreSQL: dual approval cannot be bypassed, concurrent
approvals make one transition and one provider submission, and timeouts or a crash never buy twice."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.adapters.providers import SimulatedProvider
from gpufleet.adapters.sql.models import ReservationRow
from tests.integration.conftest import Database, LiveServer, ServerFactory

SMALL = {"sku": "h100_80gb", "units": 1, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
BIG = {**SMALL, "units": 8, "term_months": 12}  # 8 x 4.3619 $/h x 8760 h = 305,682 $ > 100,000 $ threshold


def _create(server: LiveServer, body: dict[str, Any]) -> dict[str, Any]:
    with server.client("finops_admin", "fiona") as c:
        r = c.post("/v1/reservations", json=body)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def _approve(server: LiveServer, rid: str, role: str, user: str) -> Any:
    with server.client(role, user) as c:
        return c.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "ML-2026"})


def test_small_reservation_needs_one_approval_and_reaches_the_provider(
    database: Database, make_server: ServerFactory
) -> None:
    server = make_server(database)
    res = _create(server, SMALL)
    assert res["status"] == "pending_approval" and res["approvals_required"] == 1
    assert res["reservation_id"].startswith("res_")
    assert res["est_cost_usd"] == pytest.approx(4.3619 * 730, abs=0.01)
    r = _approve(server, res["reservation_id"], "ml_platform_admin", "bob")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "submitted_to_cloud"
    assert r.json()["provider_order_id"]


def test_big_reservation_needs_a_finops_and_a_platform_approver(database: Database, make_server: ServerFactory) -> None:
    server = make_server(database)
    rid = _create(server, BIG)["reservation_id"]
    first = _approve(server, rid, "finops_admin", "alice")
    assert first.status_code == 200 and first.json()["status"] == "pending_approval"
    # the same user cannot approve twice
    again = _approve(server, rid, "finops_admin", "alice")
    assert again.status_code == 409 and again.headers["content-type"] == "application/problem+json"
    # a second finops admin is not the second approver the rule asks for
    same_role = _approve(server, rid, "finops_admin", "fred")
    assert same_role.status_code == 409 and "ml_platform_admin" in same_role.json()["detail"]
    # roles that may not approve at all
    assert _approve(server, rid, "viewer", "vic").status_code == 403
    with server.client("app_team", "ann", team="team-a") as c:
        assert c.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "X"}).status_code == 403
    # approving on behalf of someone else is refused, naming the field
    with server.client("ml_platform_admin", "bob") as c:
        spoof = c.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "X", "approver_ids": ["carol", "dan"]})
    assert spoof.status_code == 422 and spoof.json()["field"] == "approver_ids"
    with server.client() as anon:
        assert anon.get(f"/v1/reservations/{rid}").status_code == 401
    assert server.services.provider.find(f"gpufleet-{rid}") is None  # type: ignore[attr-defined]
    second = _approve(server, rid, "ml_platform_admin", "bob")
    assert second.status_code == 200 and second.json()["status"] == "submitted_to_cloud"
    assert {a["role"] for a in second.json()["approvals"]} == {"finops_admin", "ml_platform_admin"}
    with server.client("viewer", "vic") as c:
        events = c.get("/v1/audit", params={"entity_id": rid}).json()
    actions = [e["action"] for e in events]
    assert actions.count("reservation.approval_recorded") == 2
    assert [e["detail"]["to"] for e in events if e["action"] == "reservation.status_changed"] == [
        "approved",
        "submitted",
    ]


def test_twenty_concurrent_approvals_make_one_transition_and_one_submission(
    database: Database, make_server: ServerFactory
) -> None:
    provider = SimulatedProvider(database.engine)
    server = make_server(database, provider=provider, worker_threads=20)  # all 20 handlers really run at once
    rid = _create(server, SMALL)["reservation_id"]
    users = [("finops_admin" if i % 2 else "ml_platform_admin", f"approver{i}") for i in range(20)]
    for role, user in users:  # tokens exist before the race starts
        server.token(role, user)
    with ThreadPoolExecutor(max_workers=20) as pool:
        codes = list(pool.map(lambda ru: _approve(server, rid, *ru).status_code, users))
    assert codes.count(200) == 1, codes
    assert codes.count(409) == 19, codes
    assert provider.calls == 1
    assert len(provider.orders()) == 1
    with server.client("viewer", "vic") as c:
        events = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.status_changed"}).json()
    assert [e["detail"]["to"] for e in events] == ["approved", "submitted"]


def test_concurrent_dual_approvals_record_one_of_each_role_and_submit_once(
    database: Database, make_server: ServerFactory
) -> None:
    provider = SimulatedProvider(database.engine)
    server = make_server(database, provider=provider, worker_threads=20)
    rid = _create(server, BIG)["reservation_id"]
    users = [("finops_admin" if i % 2 else "ml_platform_admin", f"approver{i}") for i in range(20)]
    for role, user in users:
        server.token(role, user)
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda ru: _approve(server, rid, *ru), users))
    codes = [a.status_code for a in answers]
    assert codes.count(200) == 2 and codes.count(409) == 18, codes
    statuses = sorted(a.json()["status"] for a in answers if a.status_code == 200)
    assert statuses == ["pending_approval", "submitted_to_cloud"]
    with server.client("viewer", "vic") as c:
        final = c.get(f"/v1/reservations/{rid}").json()
    assert sorted(a["role"] for a in final["approvals"]) == ["finops_admin", "ml_platform_admin"]
    assert provider.calls == 1 and len(provider.orders()) == 1


def test_retried_proposals_with_an_idempotency_key_create_one_reservation(
    database: Database, make_server: ServerFactory
) -> None:
    server = make_server(database, worker_threads=10)
    server.token("finops_admin", "fiona")

    def propose(body: dict[str, Any]) -> Any:
        with server.client("finops_admin", "fiona") as c:
            return c.post("/v1/reservations", json=body, headers={"Idempotency-Key": "plan-2026-q1"})

    with ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(propose, [SMALL] * 10))
    assert {a.status_code for a in answers} == {201}
    assert len({a.json()["reservation_id"] for a in answers}) == 1
    other = propose({**SMALL, "units": 2})
    assert other.status_code == 409 and "Idempotency-Key" in other.json()["detail"]
    with server.client("viewer", "vic") as c:
        assert len(c.get("/v1/reservations").json()) == 1


def test_provider_timeout_then_retry_buys_once(database: Database, make_server: ServerFactory) -> None:
    provider = SimulatedProvider(database.engine)
    server = make_server(database, provider=provider, provider_max_attempts=3)
    rid = _create(server, SMALL)["reservation_id"]
    provider.inject("timeout_after_order")  # the order is placed, the answer is lost
    provider.inject("timeout_before_order")
    r = _approve(server, rid, "finops_admin", "alice")
    assert r.json()["status"] == "submitted_to_cloud"
    assert provider.calls == 3
    assert [o.idempotency_key for o in provider.orders()] == [f"gpufleet-{rid}"]


def test_all_attempts_time_out_then_a_later_retry_buys_once(database: Database, make_server: ServerFactory) -> None:
    provider = SimulatedProvider(database.engine)
    server = make_server(database, provider=provider, provider_max_attempts=2)
    rid = _create(server, SMALL)["reservation_id"]
    provider.inject("timeout_after_order")
    provider.inject("timeout_after_order")
    r = _approve(server, rid, "finops_admin", "alice")
    assert r.status_code == 200 and r.json()["status"] == "approved"  # unknown outcome: not claimed submitted
    with server.client("ml_platform_admin", "bob") as c:
        retry = c.post(f"/v1/reservations/{rid}/submit")
        assert retry.json()["status"] == "submitted_to_cloud"
        assert c.post(f"/v1/reservations/{rid}/submit").json()["status"] == "submitted_to_cloud"
    assert len(provider.orders()) == 1


class Crash(Exception):
    """Stands for the process dying between the provider call and the database commit."""


def _crash(point: str) -> None:
    raise Crash(point)


def test_crash_between_provider_call_and_commit_is_reconciled_on_restart(
    database: Database, make_server: ServerFactory
) -> None:
    provider = SimulatedProvider(database.engine)
    doomed = make_server(database, provider=provider, crash_hook=_crash)
    rid = _create(doomed, SMALL)["reservation_id"]
    r = _approve(doomed, rid, "finops_admin", "alice")
    assert r.status_code == 500 and r.headers["content-type"] == "application/problem+json"
    doomed.stop()
    with Session(database.engine) as s:
        assert s.scalar(select(ReservationRow.status).where(ReservationRow.id == rid)) == "approved"
    assert len(provider.orders()) == 1  # bought, but not recorded

    restarted = make_server(database, provider=SimulatedProvider(database.engine))  # startup runs the reconciler
    with restarted.client("viewer", "vic") as c:
        after = c.get(f"/v1/reservations/{rid}").json()
    assert after["status"] == "submitted_to_cloud"
    assert after["provider_order_id"] == provider.orders()[0].order_id
    assert len(provider.orders()) == 1
    with Session(database.engine) as s:
        assert s.scalar(select(func.count()).select_from(ReservationRow)) == 1


def test_reconciler_activates_started_commitments(database: Database, make_server: ServerFactory) -> None:
    server = make_server(database)
    rid = _create(server, SMALL)["reservation_id"]
    _approve(server, rid, "finops_admin", "alice")
    server.services.clock.advance(40 * 86400)  # type: ignore[attr-defined]
    with server.client("finops_admin", "alice") as c:
        report = c.post("/v1/reservations:reconcile").json()
        assert report["activated"] == [rid]
        assert c.get(f"/v1/reservations/{rid}").json()["status"] == "active"
        server.services.clock.advance(40 * 86400)  # type: ignore[attr-defined]
        assert c.post("/v1/reservations:reconcile").json()["expired"] == [rid]


def test_reject_and_cancel_only_before_the_provider(database: Database, make_server: ServerFactory) -> None:
    server = make_server(database)
    a = _create(server, SMALL)["reservation_id"]
    b = _create(server, SMALL)["reservation_id"]
    with server.client("finops_admin", "alice") as c:
        assert c.post(f"/v1/reservations/{a}/reject", json={"reason": "too early"}).json()["status"] == "rejected"
        assert c.post(f"/v1/reservations/{a}/approve", json={"budget_code": "X"}).status_code == 409
        assert c.post(f"/v1/reservations/{b}/approve", json={"budget_code": "X"}).status_code == 200
        late = c.post(f"/v1/reservations/{b}/cancel", json={})
        assert late.status_code == 409
        listed = c.get("/v1/reservations", params={"status": "submitted_to_cloud"}).json()
        assert [x["reservation_id"] for x in listed] == [b]
