"""Review (susp): how many planned runs one team may register (``/v1/planned-runs``), on SQLite and PostgreSQL.

Every run to come of a SKU-region is weighed by the procurement decision (control/planned_runs.py): 200 distinct
overlapping runs made one decision take 7-13 s (``PlannedRunReserve.nodes``, measured on this machine), so one
app_team token could make every ``plans:propose`` and the reconciler's pass of that SKU-region that slow."""

from __future__ import annotations

from tests.integration.conftest import NOW_S, Database, ServerFactory
from tests.integration.test_review_planned_api import DAY, _run, _setup


def test_a_team_registers_at_most_fifty_runs_to_come(database: Database, make_server: ServerFactory) -> None:
    """Review (fixed), the defect: a team could register any number of runs (each name unique), and the pass weighs
    them all. Expected: at most 50 runs to come per team (not cancelled, not started); the 51st is a 422
    problem+json naming ``team``; a cancelled run frees its place, and other teams are not affected."""
    s = make_server(database)
    _setup(s)
    with s.client("ml_platform_admin", "bob") as bob:
        assert bob.post("/v1/teams", json={"id": "team-q", "name": "team-q"}).status_code == 201
    with s.client("app_team", "ann", "team-p") as ann:
        ids = []
        for i in range(50):
            r = ann.post("/v1/planned-runs", json=_run(name=f"sweep-{i}", start_s=NOW_S + (20 + i) * DAY, gpus=8))
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        extra = ann.post("/v1/planned-runs", json=_run(name="one-more", gpus=8))
        assert extra.status_code == 422, extra.text
        assert extra.headers["content-type"].startswith("application/problem+json")
        assert extra.json()["field"] == "team" and "50" in extra.json()["detail"]
        assert ann.delete(f"/v1/planned-runs/{ids[0]}").status_code == 200
        assert ann.post("/v1/planned-runs", json=_run(name="one-more", gpus=8)).status_code == 201
    with s.client("app_team", "quinn", "team-q") as quinn:
        assert quinn.post("/v1/planned-runs", json=_run(name="q-1", team="team-q", gpus=8)).status_code == 201
