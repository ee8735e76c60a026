"""Review (hostile): ``POST /v1/utilization:ingest`` on SQLite and PostgreSQL: bad CSV that is a 500, and
concurrent batches that bill one workload to two teams."""

from __future__ import annotations

import threading

import httpx
from sqlalchemy import text

from tests.integration.conftest import NOW_S, Database, ServerFactory

PROBLEM = "application/problem+json"
HEADER = "source,bucket_start_s,bucket_s,workload_id,team_id,sku_id,gpus_allocated,gpu_util\n"


def test_a_csv_cell_over_128_kib_is_a_422_not_a_500(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: parse_csv (service/ingest.py parse_csv) iterates ``csv.DictReader`` outside its try
    block and catches only TypeError/ValueError; a cell longer than the csv module's field limit (131,072 characters,
    well under the 8 MiB upload limit) raises ``_csv.Error``, which no handler maps: 500. Expected: 422 problem+json
    naming the body (or the record)."""
    s = make_server(database)
    body = HEADER + f"k8s,{NOW_S - 3600},3600,wl-x,team-x,h100_80gb,1," + "9" * 200_000 + "\n"
    with s.client("ml_platform_admin", "adm") as c:
        r = c.post("/v1/utilization:ingest", content=body.encode(), headers={"Content-Type": "text/csv"})
    assert r.status_code == 422, (r.status_code, r.text[:300])
    assert r.headers["content-type"] == PROBLEM


def test_concurrent_batches_cannot_bill_one_workload_to_two_teams(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: IngestService._check_owners decides a workload's team from the records already
    stored, read without a lock; on PostgreSQL (READ COMMITTED, no write lock at BEGIN as SQLite's BEGIN IMMEDIATE) two
    concurrent batches for a new workload naming different teams both find no history and both commit. The workload is
    then billed to two teams, the very thing the check refuses ("one team's workload cannot be billed to another").
    Expected: one batch is refused (422 naming records[i].team_id); the stored records name one team."""
    s = make_server(database)
    token = s.token("ml_platform_admin", "adm")
    workloads = [f"ghost-{i}" for i in range(12)]

    def send(wid: str, team: str, source: str, gate: threading.Barrier) -> None:
        rec = {"source": source, "bucket_start_s": NOW_S - 3600, "bucket_s": 3600, "workload_id": wid,
               "team_id": team, "sku_id": "h100_80gb", "gpus_allocated": 8.0, "gpu_util": 0.5}  # fmt: skip
        batch = [{**rec, "bucket_start_s": NOW_S - 3600 * (k + 1)} for k in range(50)]
        with httpx.Client(base_url=s.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
            gate.wait()
            c.post("/v1/utilization:ingest", json={"records": batch})

    for wid in workloads:
        gate = threading.Barrier(2)
        threads = [threading.Thread(target=send, args=(wid, team, f"src-{team}", gate)) for team in ("ta", "tb")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    with database.engine.connect() as conn:
        split = (
            conn.execute(
                text("SELECT workload_id FROM utilization GROUP BY workload_id HAVING COUNT(DISTINCT team_id) > 1")
            )
            .scalars()
            .all()
        )
    assert split == [], f"workloads billed to two teams: {split}"
