"""Review (serve): ``gpufleet serve`` keeps running while its store is moved to another schema revision (restored
from an older backup, or upgraded by a newer release's ``gpufleet db upgrade``). The leader loop stops acting then
(test_review_fence2_revision.py) and ``/readyz`` answers 503, but a load balancer takes minutes to notice, and a
client talking to the pod directly never does: the API's own writes must not land with this code's model either."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
from sqlalchemy import event, func, select, text

from gpufleet.adapters.sql.migrate import head_revision
from gpufleet.adapters.sql.models import TeamRow
from tests.integration.conftest import Database, ServerFactory

FUTURE = "0099_a_newer_release"
PROBLEM = "application/problem+json"


def _stamp(db: Database, revision: str) -> None:
    with db.engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})


def _teams(db: Database) -> int:
    with db.engine.connect() as c:
        return int(c.scalar(select(func.count()).select_from(TeamRow)) or 0)


def _until(what: Callable[[], httpx.Response | None], timeout_s: float = 5.0) -> httpx.Response | None:
    """Call ``what()`` until its answer is not None (the revision is cached for a short while), at most timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = what()
        if got is not None or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_api_writes_answer_503_while_the_store_is_at_another_revision_and_reads_keep_working(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: only ``/readyz`` and the leader loop looked at the store's revision after start;
    every API write (POST/PUT/PATCH/DELETE) went on writing into a store at another revision with this code's model
    (a newer release's columns left out, an older one's constraints missing). Now a write is a 503 problem+json naming
    both revisions, with ``Retry-After`` (``api/revision_writes.py``); reads are served; the revision read is cached
    for 2 s (one SELECT per interval, whatever the request rate), and writes are served again once it matches."""
    server = make_server(database)
    head = head_revision(database.engine)
    selects: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "alembic_version" in statement and statement.lstrip().upper().startswith("SELECT"):
            selects.append(statement)

    with server.client("ml_platform_admin", "bob") as api:
        assert api.post("/v1/teams", json={"id": "team-a", "name": "A"}).status_code == 201
        _stamp(database, FUTURE)
        n = iter(range(1_000))

        def refused() -> httpx.Response | None:
            got = api.post("/v1/teams", json={"id": f"team-x{next(n)}", "name": "X"})
            return got if got.status_code == 503 else None

        got = _until(refused)  # within the watch's interval (2 s), a write may still land: the read is cached
        assert got is not None, "a write was served with the store at another schema revision"
        before = _teams(database)
        assert got.headers["content-type"].startswith(PROBLEM), got.headers
        assert got.headers.get("retry-after"), got.headers
        assert FUTURE in got.json()["detail"] and head in got.json()["detail"], got.json()
        for method, path, body in (("PATCH", "/v1/teams/team-a", {"name": "B"}), ("DELETE", "/v1/teams/team-a", None)):
            assert api.request(method, path, json=body).status_code == 503, (method, path)
        # reads keep working
        assert api.get("/v1/teams/team-a").json()["name"] == "A"
        assert api.get("/healthz").status_code == 200

        # the watch costs one SELECT per interval, not one per request
        event.listen(database.engine, "before_cursor_execute", count)
        try:
            started, sent = time.monotonic(), 0
            while time.monotonic() - started < 3.0:  # past the interval (2 s): at least one read again
                assert api.post("/v1/teams", json={"id": f"team-y{sent}", "name": "Y"}).status_code == 503
                sent += 1
                time.sleep(0.01)
            took_s = time.monotonic() - started
        finally:
            event.remove(database.engine, "before_cursor_execute", count)
        assert 1 <= len(selects) <= 1 + int(took_s / 2.0), (len(selects), sent, took_s)

        _stamp(database, head)  # back at this code's revision: writes are served again, by themselves

        def served() -> httpx.Response | None:
            got = api.post("/v1/teams", json={"id": "team-b", "name": "B"})
            return got if got.status_code != 503 else None

        got = _until(served)
        assert got is not None and got.status_code == 201, got
        assert _teams(database) == before + 1
