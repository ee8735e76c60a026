"""NodePool limits that follow procurement, against the real API server with the Karpenter CRDs and a SQLite store:
the store-linked controller (``--node-limits-every-s``) sets the GPU limit of the NodePools `gpufleet k8s quotas`
emitted (selected by label) to the reservations active in the cluster's region (reserved) and the pool's quota
(on-demand), and leaves a NodePool the selector does not select alone."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from sqlalchemy import text

from gpufleet.adapters.kubernetes.controller import ControllerConfig
from gpufleet.adapters.kubernetes.fleetobjects import PATHS, TierCapacity, flavor_name, karpenter_objects, node_pool
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from tests.integration.k8s.helpers import running_controller, wait_for

DAY = 86_400
RESERVATION = text(
    "INSERT INTO reservations (id, pool_id, sku_id, region_id, units, start_s, term_months, price_uusd_per_gpu_h, "
    "est_cost_cents, status, version, approvals_required, created_by, created_at_s, idempotency_key) VALUES "
    "(:id, 'aws/us-east-1/h100_80gb/reserved', 'h100_80gb', 'us-east-1', :units, :start, 1, 4361900, 0, :status, 1, "
    "2, 'test', 0, :id)"
)


def _limit(kube: Kube, name: str) -> str | None:
    return (kube.get(f"{PATHS['NodePool']}/{name}")["spec"].get("limits") or {}).get("nvidia.com/gpu")


def test_the_controller_keeps_nodepool_limits_at_what_procurement_bought(kube: Kube, ns: str, tmp_path: Path) -> None:
    now = time.time()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as c:
        c.execute(text("insert into clusters (id, name, region_id) values ('k5', 'k5', 'us-east-1')"))
        c.execute(text("update pools set quota_gpus = 96 where id = 'aws/us-east-1/h100_80gb/on_demand'"))
        for rid, units, start, status in (("r-active", 16, now - DAY, "active"),
                                          ("r-ended", 64, now - 70 * DAY, "active"),  # its month is over
                                          ("r-ordered", 32, now + 7 * DAY, "submitted")):  # fmt: skip
            c.execute(RESERVATION, {"id": rid, "units": units, "start": int(start), "status": status})
    suffix = uuid.uuid4().hex[:5]
    product = f"NVIDIA-H100-T{suffix}"  # a product of this test's own
    ours = karpenter_objects([TierCapacity(product, "reserved", 0), TierCapacity(product, "on-demand", None)])
    for obj in ours:  # NodePools are cluster-wide: this test's controller selects only its own
        obj["metadata"]["labels"]["gpufleet.io/test"] = suffix
    operators = node_pool(TierCapacity(product, "reserved", 5))
    operators["metadata"] = {"name": f"ops-{suffix}", "labels": {"gpufleet.io/test": f"not-{suffix}"}}
    for obj in [*ours, operators]:
        kube.post(PATHS["NodePool"], obj)
    reserved, on_demand = flavor_name(product, "reserved"), flavor_name(product, "on-demand")
    selector = f"app.kubernetes.io/managed-by=gpufleet,gpufleet.io/test={suffix}"
    cfg = ControllerConfig(scheduler_name=f"s-{suffix}", namespace=ns, lease_name=f"l-{suffix}", store_url=url,
                           inventory_cluster="k5", node_limits_every_s=1, node_limits_selector=selector,
                           sku_map=((product, "h100_80gb"),))  # fmt: skip
    try:
        with running_controller(kube, cfg) as ctl:
            assert wait_for(lambda: _limit(kube, reserved) == "16" and _limit(kube, on_demand) == "96", 30), [
                a for a in ctl.act.audit if a["action"].startswith("node_pool")
            ]
            with engine.begin() as c:  # another order becomes active: the reserved tier may launch 8 GPUs more
                c.execute(RESERVATION, {"id": "r-more", "units": 8, "start": int(now - 60), "status": "active"})
            assert wait_for(lambda: _limit(kube, reserved) == "24", 30)
        assert _limit(kube, f"ops-{suffix}") == "5"  # the operator's NodePool (not selected) is left alone
        writes = [(a["target"], a["before"], a["after"]) for a in ctl.act.audit if a["action"] == "node_pool_limit"]
        # each limit written once: the NodePools are read afresh each round
        assert sorted(writes[:2]) == [(on_demand, None, 96), (reserved, 0, 16)] and writes[2:] == [(reserved, 16, 24)]
        assert all(a["outcome"] == "applied" for a in ctl.act.audit if a["action"] == "node_pool_limit")
    finally:
        for name in (reserved, on_demand, f"ops-{suffix}"):
            kube.delete(f"{PATHS['NodePool']}/{name}")
