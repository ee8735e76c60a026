"""Review (hostile): reading reservations over HTTP on SQLite and PostgreSQL."""

from __future__ import annotations

from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, ServerFactory


def test_reservations_beyond_the_first_page_can_be_listed(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: ``GET /v1/reservations`` (routes/reservations.py list_reservations,
    ReservationService.list) takes ``limit`` (at most 1000) but no ``offset`` or cursor, unlike every other list
    (registries, workloads, planned runs: ``offset``; audit: ``after_id``), and lists oldest first. An unknown
    ``offset`` is silently ignored, so a client paging as elsewhere gets the first page again and never sees the newer
    reservations: past 1000 of them, the newest (the ones waiting for approval) cannot be listed at all. Expected:
    paging reaches every one."""
    s = make_server(database)
    body = {"sku": "h100_80gb", "units": 1, "start": "2026-02-01T00:00:00Z", "term_months": 1,
            "regions": ["us-east-1"]}  # fmt: skip
    with s.client("finops_admin", "fran") as c:
        made = []
        for _ in range(3):
            r = c.post("/v1/reservations", json=body)
            assert r.status_code == 201, r.text
            made.append(r.json()["reservation_id"])
        first = c.get("/v1/reservations", params={"limit": 2})
        second = c.get("/v1/reservations", params={"limit": 2, "offset": 2})
    assert first.status_code == 200 and second.status_code == 200
    seen = [x["reservation_id"] for x in first.json()] + [x["reservation_id"] for x in second.json()]
    assert sorted(set(seen)) == sorted(made), seen


def test_an_approval_after_the_start_does_not_submit_an_order_that_starts_in_the_past(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: creation refuses a start in the past (reservation_proposals.check_proposal), but
    approval does not look at the start again (ReservationService.approve): a proposal left pending past its start is
    approved and submitted to the provider as an order that started 19 days ago (the reconciler activates it at once,
    and the books amortize a 1-month term of which two thirds passed before anything was bought). Expected: the late
    approval is refused (409/422) and nothing reaches the provider."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    body = {"sku": "h100_80gb", "units": 1, "start": "2026-01-02T00:00:00Z", "term_months": 1,
            "regions": ["us-east-1"]}  # fmt: skip
    with s.client("finops_admin", "fran") as fran, s.client("ml_platform_admin", "bob") as bob:
        created = fran.post("/v1/reservations", json=body)
        assert created.status_code == 201, created.text
        rid = created.json()["reservation_id"]
        clock.advance(20 * 86_400)  # the proposal waited; its start is 19 days gone
        r = bob.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "AI-2026"})
    submitted = s.services.provider.find(f"gpufleet-{rid}")  # type: ignore[attr-defined]
    assert r.status_code in (409, 422), (r.status_code, r.json().get("status"), r.json().get("start_s"), clock.now_s())
    assert submitted is None
