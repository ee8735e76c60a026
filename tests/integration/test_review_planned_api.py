"""Review of the planned-run calendar over HTTP (``/v1/planned-runs``) with the procurement pass that reads it, on
SQLite and PostgreSQL: what one team's registrations can do to the pass, and which runs a reservation is said to be
bought ahead of."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.control.planned_runs import REASON
from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory
from tests.integration.test_api_planned_runs import DAY, OD, REGION, SKU, _hourly


def _run(**change: Any) -> dict[str, Any]:
    return {
        "name": "pretrain-70b", "team": "team-p", "sku": SKU, "region": REGION, "gpus": 64,
        "start_s": NOW_S + 15 * DAY + DAY // 2, "duration_s": 14 * DAY, "probability": 1.0, **change,
    }  # fmt: skip


def _setup(s: LiveServer) -> None:
    with s.client("ml_platform_admin", "bob") as bob:
        assert bob.post("/v1/teams", json={"id": "team-p", "name": "team-p"}).status_code in (201, 409)
        assert bob.post("/v1/utilization:ingest", json={"records": _hourly(28, 8.0)}).status_code == 200
        assert bob.patch(f"/v1/pools/{OD}", json={"quota_gpus": 16}).status_code == 200


@pytest.mark.timeout(300)
def test_forty_registered_runs_do_not_break_the_procurement_pass(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: the planned-run reserve weighed every one of the 2^k combinations of the k runs
    read (``control/planned_runs.run_scenarios``), so one app_team token registering 40 uncertain runs made
    ``POST /v1/plans:propose`` a 500 (numpy's MemoryError) and the reconciler's daily pass died on every SKU (it
    catches only the service's errors).

    Now the pass reads the 40 runs and reserves ahead of them; the reconciler completes."""
    s = make_server(database)
    _setup(s)
    with s.client("app_team", "ann", "team-p") as ann, s.client("finops_admin", "fay") as fay:
        for i in range(40):
            r = ann.post("/v1/planned-runs", json=_run(name=f"sweep-{i}", gpus=8, probability=0.5))
            assert r.status_code == 201, r.text
        plan = fay.post("/v1/plans:propose", json={"sku": SKU, "region": REGION})
        assert plan.status_code == 200, plan.text[:500]
        body = plan.json()
        assert body["context"]["planned_runs"] == 40
        assert [c["reason"].split(":")[0] for c in body["created"]].count(REASON) == 1
    result = s.services.reconciler.run_once()
    (entry,) = [p for p in result.proposals if p["sku"] == SKU]
    assert "error" not in entry and entry["context"]["planned_runs"] == 40


def test_a_reservation_is_linked_only_to_the_runs_it_was_bought_ahead_of(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: ``ProcurementService._record_reasons`` linked a ``planned_run_reserve``
    reservation to every run of the SKU-region's calendar (audit ``planned_run.reserved_ahead``), so a run starting
    in two years, which no order of today weighs (it starts after the term the reservation covers), showed the
    reservation in its ``reserved_ahead``: "was my run covered?" answered yes for a run nobody reserved for.

    Only the runs the order was made for (those the reason names: due at this review) are linked."""
    s = make_server(database)
    _setup(s)
    with s.client("app_team", "ann", "team-p") as ann, s.client("finops_admin", "fay") as fay:
        near = ann.post("/v1/planned-runs", json=_run()).json()
        far = ann.post("/v1/planned-runs", json=_run(name="next-year", start_s=NOW_S + 730 * DAY)).json()
        plan = fay.post("/v1/plans:propose", json={"sku": SKU, "region": REGION}).json()
        assert plan["context"]["planned_runs"] == 2
        (made,) = [c for c in plan["created"] if c["reason"].startswith(REASON)]
        assert "pretrain-70b" in made["reason"] and "next-year" not in made["reason"]
        rid = made["reservation_id"]
        assert [a["reservation_id"] for a in ann.get(f"/v1/planned-runs/{near['id']}").json()["reserved_ahead"]] == [
            rid
        ]
        assert ann.get(f"/v1/planned-runs/{far['id']}").json()["reserved_ahead"] == []
        events = fay.get("/v1/audit", params={"entity_id": rid, "action": "reservation.proposed_by_loop"}).json()
        assert events[0]["detail"]["planned_runs"] == [near["id"]]
