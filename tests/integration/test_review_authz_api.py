"""Review (authz): who may do what over the HTTP API, attacked through the real app on SQLite and PostgreSQL.

The route x role matrix the review built from the code (every route and method against finops_admin,
ml_platform_admin, an app_team token, a viewer, no token, an expired and a revoked token) holds where the earlier
tests look; these are the holes found around it: a write a viewer makes with GETs, a query filter a list accepts and
ignores, and an admin's action the audit log names someone else for."""

from __future__ import annotations

import time

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.adapters.providers import SimulatedProvider
from gpufleet.adapters.sql.models import AuditEventRow, ForecastIssueRow
from gpufleet.service.auth import issue_token, revoke_token
from gpufleet.service.clock import FixedClock, RandomIds
from tests.integration.conftest import NOW_S, Database, ServerFactory

DAY = 86_400
SKU = "h100_80gb"
SMALL = {"sku": SKU, "units": 1, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}


def _records(days: int) -> list[dict[str, object]]:
    """A rising demand (a trend: the forecast of each horizon differs from the others' first days)."""
    return [
        {"source": "dcgm", "bucket_start_s": NOW_S - days * DAY + h * 3600, "bucket_s": 3600, "workload_id": "wl-t",
         "team_id": "team-t", "sku_id": SKU, "gpus_allocated": 4.0 + h / 24, "gpu_util": 0.5}
        for h in range(days * 24)
    ]  # fmt: skip


def test_a_viewer_cannot_grow_the_forecast_store_by_asking_for_every_horizon(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: ``GET /v1/capacity/forecast`` stored every fleet-wide forecast it serves for accuracy
    tracking (service/capacity.py -> ForecastAccuracyService.record), once per distinct forecast. A forecast of
    ``days=N`` is a different forecast for each N (the horizon chooses the model; with a trend the first days differ
    too), so a viewer, a role that writes nothing, stores up to 730 forecasts per SKU per day with GETs alone (the
    longest 730 x 3 quantiles each, about 6 MB per SKU and day), none of them in the audit log, and
    ``GET /v1/capacity/forecast/accuracy`` then reads and scores all of them on every call (the store grows without
    bound, and the figures are whatever horizons the viewer asked for). Now at most 8 served forecasts are stored per
    SKU and issue day besides the reconciler's own (service/accuracy.py; the susp review's fix of the same defect)."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as admin:
        assert admin.post("/v1/teams", json={"id": "team-t", "name": "T"}).status_code == 201
        assert admin.post("/v1/utilization:ingest", json={"records": _records(28)}).status_code == 200
    with s.client("viewer", "vic") as viewer:
        for days in range(1, 61):
            r = viewer.get("/v1/capacity/forecast", params={"sku": SKU, "days": days})
            assert r.status_code == 200, r.text
    with Session(database.engine) as session:
        stored = session.scalar(select(func.count()).select_from(ForecastIssueRow))
    assert stored is not None and stored <= 8, f"{stored} forecasts stored by one viewer's 60 GETs"


def test_a_registry_list_refuses_a_filter_it_does_not_apply(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: the registry lists (routes/registry.py ``_crud``) declare the query filters
    ``sku_id``, ``region_id``, ``cluster_id`` and ``team_id`` on every list (hidden from the schema where the list
    does not offer them), validate them, and then drop those the list does not apply: ``GET /v1/nodes?sku_id=...``
    answered 200 with every node of every SKU, so a script that meant to drain the A100 nodes read the H100 ones
    too. Now a filter the list does not offer is a 422 naming it and the filters it does offer."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as admin:
        assert admin.post("/v1/clusters", json={"id": "c-1", "name": "c1", "region_id": "us-east-1"}).status_code == 201
        for node, sku in (("n-h100", SKU), ("n-a100", "a100_80gb")):
            body = {"id": node, "cluster_id": "c-1", "sku_id": sku, "gpus_total": 8}
            assert admin.post("/v1/nodes", json=body).status_code == 201, body
        r = admin.get("/v1/nodes", params={"sku_id": "a100_80gb"})
        assert r.status_code == 422, [n["id"] for n in r.json()]
        assert r.json()["field"] == "sku_id" and "cluster_id" in r.json()["detail"]
        r = admin.get("/v1/teams", params={"region_id": "us-east-1"})
        assert r.status_code == 422 and r.json()["field"] == "region_id"
        # the filters a list offers still work
        assert [n["id"] for n in admin.get("/v1/nodes", params={"cluster_id": "c-1"}).json()] == ["n-a100", "n-h100"]
        pools = admin.get("/v1/pools", params={"sku_id": "a100_80gb"}).json()
        assert pools and {p["sku_id"] for p in pools} == {"a100_80gb"}


def test_a_reconcile_pass_an_admin_asks_for_is_audited_under_the_admin(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: ``POST /v1/reservations:reconcile`` submits every approved reservation to the
    provider (it places orders: it spends) on an admin's request, but ``ProviderOrders.reconcile`` audits each
    submission under the actor ``reconciler``, the leader's background pass: the audit log never named the admin
    who sent the orders, and nothing else recorded the request. Now a pass an admin asks for audits its submissions
    under that admin (the leader's own passes stay ``reconciler``)."""
    provider = SimulatedProvider(database.engine)
    s = make_server(database, provider=provider, provider_max_attempts=1)
    with s.client("finops_admin", "fiona") as fiona:
        rid = fiona.post("/v1/reservations", json=SMALL).json()["reservation_id"]
    provider.inject("timeout_before_order")  # the approval's submission gets no answer: the reservation stays approved
    with s.client("ml_platform_admin", "alice") as alice:
        r = alice.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "ML-2026"})
        assert r.status_code == 200 and r.json()["status"] == "approved", r.text
    with s.client("finops_admin", "carol") as carol:
        r = carol.post("/v1/reservations:reconcile")
        assert r.status_code == 200 and r.json()["submitted"] == [rid], r.text
    with Session(database.engine) as session:
        events = session.execute(
            select(AuditEventRow.actor, AuditEventRow.action, AuditEventRow.detail_json)
            .where(AuditEventRow.entity_id == rid)
            .order_by(AuditEventRow.id)
        ).all()
    submitted = [actor for actor, _action, detail in events if '"submitted"' in detail]
    assert submitted == ["carol"], events


def test_a_revoked_or_expired_token_stops_working_in_a_long_lived_process(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (holds): a process caches a verified token for ``token_cache_s``; a token revoked meanwhile works at
    most that long after the revocation (docs/api.md), and an expired one stops at once, cached or not, on every
    route (a read, a write, the metrics)."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock, token_cache_s=1.0)
    revoked = issue_token(database.engine, clock, RandomIds(), role="finops_admin", user_id="rex", team_id=None)
    expiring = issue_token(
        database.engine, clock, RandomIds(), role="finops_admin", user_id="eve", team_id=None, ttl_s=60
    )
    with httpx.Client(base_url=s.base_url, timeout=30) as c:
        for tok in (revoked, expiring):  # verified once: now cached
            assert c.get("/v1/reservations", headers={"Authorization": f"Bearer {tok.token}"}).status_code == 200
        revoke_token(database.engine, clock, revoked.token_id)
        clock.advance(61)  # the cached expiring token is past its expiry: refused at once, from the cache
        assert c.get("/v1/reservations", headers={"Authorization": f"Bearer {expiring.token}"}).status_code == 401
        time.sleep(1.2)  # past token_cache_s: the revocation is seen
        for tok in (revoked, expiring):
            auth = {"Authorization": f"Bearer {tok.token}"}
            for method, path in (("GET", "/v1/reservations"), ("POST", "/v1/reservations:reconcile"),
                                 ("GET", "/metrics"), ("DELETE", "/v1/teams/nobody/budget")):  # fmt: skip
                r = c.request(method, path, headers=auth)
                assert r.status_code == 401, (tok.token_id, method, path, r.text)
                assert r.headers["www-authenticate"] == "Bearer"


def test_an_unknown_query_parameter_is_refused_not_ignored(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: request bodies forbid unknown fields, query strings did not: FastAPI drops a
    parameter the route does not declare. The SKU filter is ``sku`` on the planning routes (forecast, outlook, planned
    runs) and ``sku_id`` on the registry lists, so ``GET /v1/pools?sku=a100_80gb`` answers 200 with the pools of every
    SKU (a test of this repository made that very mistake: tests/integration/test_hardening_http.py); a write takes it
    too: ``DELETE /v1/teams/{id}/budget?dry_run=true`` deleted the budget. Now a ``/v1`` query parameter no route
    declares is a 422 naming it (api/hardening.py ``refuse_unknown_query``); the budget is still there."""
    s = make_server(database)
    with s.client("finops_admin", "fay") as admin:
        r = admin.get("/v1/pools", params={"sku": "a100_80gb"})
        assert r.status_code == 422, sorted({p["sku_id"] for p in r.json()})
        assert r.json()["field"] == "sku"
        assert admin.put("/v1/teams/team-t/budget", json={"limit_usd": 100}).status_code in (200, 404)
        r = admin.delete("/v1/teams/team-t/budget", params={"dry_run": "true"})
        assert r.status_code == 422 and r.json()["field"] == "dry_run"
        assert "unknown query parameter" in r.json()["detail"]
        r = admin.get("/v1/pools", params={"sku_id": "a100_80gb"})  # a declared filter still filters
        assert r.status_code == 200 and {p["sku_id"] for p in r.json()} <= {"a100_80gb"}, r.text
