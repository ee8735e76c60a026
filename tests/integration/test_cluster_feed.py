"""``GET /v1/clusters/{cluster}/feed`` over HTTP on SQLite and PostgreSQL: what the cluster's controller has fed the
store (its inventory sync, its metered hours), each ok, stale or never; other clusters' records never counted (an
id with ``_`` is not a LIKE wildcard); app_team tokens refused, an unknown cluster a 404."""

from __future__ import annotations

import pytest

from gpufleet.adapters.kubernetes.inventory import sync_inventory
from gpufleet.control.observation import Observation, ObservedNode
from gpufleet.schedule.table import NodeSpec
from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, ServerFactory

H = 3600
PROBLEM = "application/problem+json"


def _record(source: str, workload: str, hour_s: int, util: float | None) -> dict[str, object]:
    return {"source": source, "bucket_start_s": hour_s, "bucket_s": H, "workload_id": workload, "team_id": "ml",
            "sku_id": "h100_80gb", "gpus_allocated": 4.0, "gpu_util": util}  # fmt: skip


def test_the_feed_says_what_the_controller_wrote_and_when(database: Database, make_server: ServerFactory) -> None:
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    with s.client("ml_platform_admin", "bob") as bob, s.client("viewer", "vic") as vic:
        assert bob.post("/v1/clusters", json={"id": "c_1", "name": "prod", "region_id": "us-east-1"}).status_code == 201
        got = vic.get("/v1/clusters/c_1/feed").json()
        assert (got["inventory"]["status"], got["usage"]["status"]) == ("never", "never")
        assert got["usage"]["util_unmeasured_share_last_day"] is None

        node = ObservedNode(NodeSpec("gpu-0", 128_000, 1_024_000, 8), sku="NVIDIA-H100-80GB-HBM3")
        sync_inventory(database.engine, "c_1", Observation(NOW_S, (node,), ()), now_s=NOW_S - 60)
        hour = (NOW_S // H - 2) * H  # the last hour the meter wrote: it ended over an hour ago
        records = [
            _record("k8s:c_1:us-east-1:h100_80gb:on_demand", "ns:train", hour, 0.5),
            _record("k8s:c_1:h100_80gb", "ns:dark", hour, None),  # no DCGM reading: not measured
            _record("k8s:c_1:h100_80gb", "ns:dark", hour - H, None),
            _record("k8s:cx1:h100_80gb", "ns:other", hour + H, 0.9),  # another cluster ("_" must not match "x")
            _record("dcgm-export", "ns:api", hour + H, 0.9),  # not the controller's
        ]
        assert bob.post("/v1/utilization:ingest", json={"records": records}).status_code == 200
        got = vic.get("/v1/clusters/c_1/feed").json()
        assert got["inventory"] == {"status": "ok", "last_synced_s": NOW_S - 60, "nodes": 1, "pods": 0,
                                    "syncs_last_day": 1}  # fmt: skip
        assert got["usage"] == {"status": "ok", "last_hour_s": hour, "records_last_hour": 2,
                                "gpu_hours_last_day": 12.0, "util_unmeasured_share_last_day": pytest.approx(2 / 3,
                                                                                                          abs=1e-4)}  # fmt: skip

        clock.set(NOW_S + 4 * H)  # the controller stopped feeding: both go stale
        got = vic.get("/v1/clusters/c_1/feed").json()
        assert (got["inventory"]["status"], got["usage"]["status"]) == ("stale", "stale")

    with s.client("app_team", "ann", team="ml") as ann, s.client("viewer", "vic") as vic:
        r = ann.get("/v1/clusters/c_1/feed")
        assert r.status_code == 403 and r.headers["content-type"].startswith(PROBLEM)
        r = vic.get("/v1/clusters/nope/feed")
        assert r.status_code == 404 and r.headers["content-type"].startswith(PROBLEM)
