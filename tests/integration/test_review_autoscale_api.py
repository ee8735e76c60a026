"""Review (autoscale): ``GET /v1/workloads/{id}/autoscaling/decision`` on rates its query accepts, over HTTP on
SQLite and PostgreSQL."""

from __future__ import annotations

from tests.integration.conftest import Database, ServerFactory

SKU = "h100_80gb"


def test_a_rate_jump_from_nearly_nothing_gets_a_decision_not_a_500(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: the step pre-warm (``SpareReplicas._step_floor``) overflowed: a 500.
    Six days of hourly rates in the accepted range [0, 1e9] whose hour 1 jumps from 1e-300 to 1e9: the step
    pre-warm's jump ratio overflowed to inf and ``math.ceil`` raised, so the service answered 500 instead of a
    decision within [min, max]."""
    s = make_server(database)
    with s.client("ml_platform_admin", "bob") as c:
        c.post("/v1/teams", json={"id": "team-p", "name": "P"})
        c.post("/v1/tenants", json={"id": "team-p-prod", "name": "prod", "team_id": "team-p"})
    wl = {"name": "chat", "image": "registry.example/llm:1", "cpu": 8, "mem_gb": 64, "gpus": 1, "gpu_sku": SKU,
          "min_replicas": 1, "max_replicas": 10, "scale_metric": "rps", "team": "team-p", "tenant": "team-p-prod",
          "priority": "normal"}  # fmt: skip
    with s.client("app_team", "ann", "team-p") as app:
        wid = app.post("/v1/workloads", json=wl).json()["workload_id"]
        path = f"/v1/workloads/{wid}/autoscaling"
        assert app.put(path, json={"min": 1, "max": 10, "target_rps": 10, "version": 1}).status_code == 200
        rps = [1e9 if h == 1 else (1e-300 if h == 0 else 10.0) for _ in range(6) for h in range(24)]
        r = app.get(f"{path}/decision", params={"rps": rps, "period_s": 3600})
        assert r.status_code == 200, r.text
        assert 1 <= r.json()["desired_replicas"] <= 10
