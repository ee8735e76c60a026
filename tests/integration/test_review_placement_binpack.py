"""The bin-packing report over HTTP (GET /v1/clusters/{id}/binpack, service/binpack.py over control/packing.py) on
SQLite and PostgreSQL: a suggested move must land on a node the workload can run on. docs/schedule.md says the
consolidation planner's destinations admit the pod (GPU model included); the report's nodes carry their SKU."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import Database, ServerFactory


def _node(c: Any, node_id: str, sku: str, allocs: list[tuple[str, int]]) -> None:
    body = {"id": node_id, "cluster_id": "c-mix", "sku_id": sku, "gpus_total": 8,
            "allocations": [{"workload_id": w, "gpus": g} for w, g in allocs]}  # fmt: skip
    r = c.post("/v1/nodes", json=body)
    assert r.status_code == 201, r.text


def test_binpack_never_moves_work_onto_a_node_of_another_gpu_model(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: the report's node table carried GPU counts only, so a checkpointed H100 job on a
    half-empty H100 node was "moved" onto the fuller A100 node (a move no scheduler can make) and the H100 node
    reported freed."""
    server = make_server(database)
    with server.client("ml_platform_admin", "bob") as c, server.client("viewer", "vic") as v:
        assert c.post("/v1/teams", json={"id": "t-pack", "name": "pack"}).status_code == 201
        assert c.post("/v1/tenants", json={"id": "t-pack-p", "name": "p", "team_id": "t-pack"}).status_code == 201
        assert c.post("/v1/clusters", json={"id": "c-mix", "name": "mix", "region_id": "us-east-1"}).status_code == 201
        ids = {}
        for name, sku in (("on-a100", "a100_80gb"), ("on-h100", "h100_80gb"), ("on-h100-b", "h100_80gb")):
            body = {"name": name, "image": "r/x:1", "gpus": 1, "gpu_sku": sku, "min_replicas": 1,
                    "scale_metric": "rps", "team": "t-pack", "priority": "normal", "kind": "training",
                    "checkpoint_interval_s": 1800}  # fmt: skip
            r = c.post("/v1/workloads", json=body)
            assert r.status_code == 201, r.text
            ids[name] = r.json()["workload_id"]
        _node(c, "a-0", "a100_80gb", [(ids["on-a100"], 6)])
        _node(c, "h-1", "h100_80gb", [(ids["on-h100"], 2)])
        pack = v.get("/v1/clusters/c-mix/binpack").json()
        assert pack["suggested_moves"] == [] and pack["nodes_freed"] == [], pack
        assert pack["fragmentation_after"] == pack["fragmentation"]
        # a second H100 node with room: the H100 job moves there (same model), never to the A100 node
        _node(c, "h-2", "h100_80gb", [(ids["on-h100-b"], 5)])
        pack = v.get("/v1/clusters/c-mix/binpack").json()
        assert [(m["workload_id"], m["from_node"], m["to_node"]) for m in pack["suggested_moves"]] == [
            (ids["on-h100"], "h-1", "h-2")
        ]
        assert pack["nodes_freed"] == ["h-1"]
