"""Review (loose) over HTTP on SQLite and PostgreSQL: the admissions' ``Idempotency-Key`` rows
(``placement_admissions``) are kept for a retention, then pruned."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select

from gpufleet.adapters.sql.models import PlacementAdmissionRow
from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, ServerFactory

URL = "/v1/placement/recommendations"
OD = "aws/us-east-1/h100_80gb/on_demand"
JOB = {"job_class": "training", "priority": "high", "sku": "h100_80gb", "gpus": 8, "regions": ["us-east-1"]}
HOUR = 3600


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _keys(db: Database) -> list[str]:
    with db.engine.connect() as c:
        return sorted(c.execute(select(PlacementAdmissionRow.client_key)).scalars())


def test_admission_keys_are_pruned_after_their_retention(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: every ``admit: true`` sent with an ``Idempotency-Key`` left a row in ``placement_admissions`` (its
    fingerprint and its whole answer) that nothing ever deleted: the table grew without bound. Now a key is kept for
    the retention (24 h by default) and a retry within it still answers the same and books nothing; past it, the row
    is pruned."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 64, "allocated_gpus": 0}).status_code == 200
        body = {**JOB, "admit": True}
        first = _ok(a.post(URL, json=body, headers={"Idempotency-Key": "train-1"}))
        assert first["action"] == "place", first
        clock.advance(23 * HOUR)  # within the retention: the same answer, nothing booked again
        assert _ok(a.post(URL, json=body, headers={"Idempotency-Key": "train-1"})) == first
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8
        assert _keys(database) == ["train-1"]
        clock.advance(2 * HOUR)  # 25 h after train-1: the next keyed admission prunes it
        _ok(a.post(URL, json=body, headers={"Idempotency-Key": "train-2"}))
        assert _keys(database) == ["train-2"]


def test_the_retention_is_a_setting(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed): ``placement_admission_key_retention_s`` sets how long a key answers the same; the prune runs at
    most hourly by a process, and a key pruned is a new admission (it books again)."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock, placement_admission_key_retention_s=2 * HOUR)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 64, "allocated_gpus": 0}).status_code == 200
        body = {**JOB, "admit": True}
        first = _ok(a.post(URL, json=body, headers={"Idempotency-Key": "k"}))
        clock.advance(2 * HOUR - 1)
        assert _ok(a.post(URL, json=body, headers={"Idempotency-Key": "k"})) == first
        clock.advance(30 * 60)  # past the retention, but within an hour of the last prune: kept until the next one
        assert _ok(a.post(URL, json=body, headers={"Idempotency-Key": "k"})) == first
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 8
        clock.advance(HOUR)
        _ok(a.post(URL, json=body, headers={"Idempotency-Key": "k"}))  # pruned first: a new admission
        assert a.get(f"/v1/pools/{OD}").json()["allocated_gpus"] == 16
        assert _keys(database) == ["k"]
