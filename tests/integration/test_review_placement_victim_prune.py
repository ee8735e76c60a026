"""Review (placement, session place3) over HTTP on SQLite and PostgreSQL: the promises of victims
(``placement_victims``) once they ended."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select

from gpufleet.adapters.sql.models import PlacementVictimRow
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


def _promised(db: Database) -> list[str]:
    with db.engine.connect() as c:
        return sorted(c.execute(select(PlacementVictimRow.workload_id)).scalars())


def test_ended_victim_promises_are_pruned(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: a victim's promise ends with its hold (1 h) but its row in ``placement_victims``
    stays for good: every (pool, workload) ever preempted by an admission is kept, and every placement that lists
    running work in the pool reads them all (the table grows without bound, as the admission keys did before they
    were pruned). Expected: promises that ended are deleted by a later admission (at most hourly per process), those
    still held are kept."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    with s.client("ml_platform_admin", "ada") as a:
        assert a.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16, "allocated_gpus": 16}).status_code == 200
        for i in range(3):
            low = [{"workload_id": f"w{i}", "pool": OD, "gpus": 8, "priority": "low"}]
            got = _ok(a.post(URL, json={**JOB, "admit": True, "running": low}))
            assert got["victims"] == [f"w{i}"], got
            clock.advance(10 * 60)
        assert _promised(database) == ["w0", "w1", "w2"]
        clock.advance(45 * 60)  # at 75 min: w0's and w1's holds ended (1 h), w2's holds 5 minutes more
        low = [{"workload_id": "w9", "pool": OD, "gpus": 8, "priority": "low"}]
        assert _ok(a.post(URL, json={**JOB, "admit": True, "running": low}))["victims"] == ["w9"]
        assert _promised(database) == ["w2", "w9"]
