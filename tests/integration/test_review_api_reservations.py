"""Review (hostile): reading reservations over HTTP on SQLite and PostgreSQL."""

from __future__ import annotations

from tests.integration.conftest import Database, ServerFactory


def test_reservations_beyond_the_first_page_can_be_listed(database: Database, make_server: ServerFactory) -> None:
    """Defect: ``GET /v1/reservations`` (routes/reservations.py list_reservations, ReservationService.list) takes
    ``limit`` (at most 1000) but no ``offset`` or cursor, unlike every other list (registries, workloads, planned
    runs: ``offset``; audit: ``after_id``), and lists oldest first. An unknown ``offset`` is silently ignored, so a
    client paging as elsewhere gets the first page again and never sees the newer reservations: past 1000 of
    them, the newest (the ones waiting for approval) cannot be listed at all. Expected: paging reaches every one."""
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
