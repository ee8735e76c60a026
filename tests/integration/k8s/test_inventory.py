"""Cluster inventory flows into the store (SQLite, migrated), and the service's bin-packing report reads it."""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.inventory import sync_inventory
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import NodeRow
from gpufleet.domain.catalog import sku_for
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body
from tests.integration.k8s.test_observe import _obs


def test_sku_tokens() -> None:
    ids = ["h100_80gb", "a100_80gb", "l4", "l40s", "b200"]
    assert sku_for("NVIDIA-H100-80GB-HBM3", ids, {}) == "h100_80gb"
    assert sku_for("NVIDIA-A100-SXM4-80GB", ids, {}) == "a100_80gb"
    assert sku_for("NVIDIA-L40S", ids, {}) == "l40s"
    assert sku_for("NVIDIA-H200", ids, {}) is None
    assert sku_for("NVIDIA-H200", ids, {"NVIDIA-H200": "h200_141gb"}) == "h200_141gb"


def test_inventory_sync_writes_nodes_and_allocations(kube: Kube, kubelet: FakeKubelet, ns: str, tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    migrate.upgrade(engine)
    with engine.begin() as c:
        c.execute(text("insert into clusters (id, name, region_id) values ('k1', 'k1', 'us-east-1')"))
    p = f"i{uuid.uuid4().hex[:5]}"
    names = {f"{p}-0", f"{p}-1", f"{p}-2"}
    kubelet.register([FakeNode(f"{p}-0"), FakeNode(f"{p}-1"), FakeNode(f"{p}-2", product="Mystery-GPU")])
    for i, gpus in enumerate((4, 2)):
        body = pod_body(f"w{i}", PodRequest("x", 1000, 1024, gpus, 1000), "none")
        body["spec"]["nodeName"] = f"{p}-0"
        create_pod(kube, ns, body)
    got = sync_inventory(engine, "k1", _obs(kube, names, ns), now_s=1)
    assert (got.nodes_written, got.pods_allocated, got.skipped) == (2, 2, ((f"{p}-2", "unknown_sku"),))
    with Session(engine) as s:
        rows = {r.id: r for r in s.scalars(select(NodeRow)).all()}
    assert rows[f"k1:{p}-0"].sku_id == "h100_80gb" and rows[f"k1:{p}-0"].gpus_total == 8
    assert sorted(a["gpus"] for a in __import__("json").loads(rows[f"k1:{p}-0"].allocations_json)) == [2, 4]
    kubelet.remove_nodes()  # the nodes vanish: the next sync deletes their rows
    again = sync_inventory(engine, "k1", _obs(kube, names, ns), now_s=2)
    assert (again.nodes_written, again.nodes_deleted) == (0, 2)
    with engine.connect() as c:
        assert c.execute(text("select count(*) from audit_events where action = 'k8s.inventory_synced'")).scalar() == 2


def test_controller_syncs_inventory_on_its_cadence(kube: Kube, kubelet: FakeKubelet, ns: str, tmp_path: Path) -> None:
    from gpufleet.adapters.kubernetes.controller import ControllerConfig
    from tests.integration.k8s.helpers import running_controller, wait_for

    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as c:
        c.execute(text("insert into clusters (id, name, region_id) values ('k2', 'k2', 'us-east-1')"))
    p = f"j{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(f"{p}-0")])
    cfg = ControllerConfig(scheduler_name=f"s-{p}", namespace=ns, lease_name=f"l-{p}", store_url=url,
                           inventory_cluster="k2", sync_every_s=1)  # fmt: skip
    with running_controller(kube, cfg) as ctl:
        assert wait_for(lambda: ctl.syncs >= 2, 30)
    with Session(engine) as s:
        assert f"k2:{p}-0" in {r.id for r in s.scalars(select(NodeRow)).all()}


def test_the_controller_binds_while_the_store_hangs_or_fails(
    kube: Kube, kubelet: FakeKubelet, ns: str, tmp_path: Path
) -> None:
    """The store's work runs on its own thread (adapters/kubernetes/store_link.py): while another process holds the
    store's write lock (a sync waits up to the 30 s busy timeout) pods still bind at once, and a sync that fails (the
    cluster deleted from the store) is recorded and retried while binding goes on."""
    import sqlite3
    import time

    from gpufleet.adapters.kubernetes.controller import ControllerConfig
    from tests.integration.k8s.helpers import pods_in, running_controller, wait_for

    path = tmp_path / "store.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    with engine.begin() as c:
        c.execute(text("insert into clusters (id, name, region_id) values ('k4', 'k4', 'us-east-1')"))
    p = f"h{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(f"{p}-0", gpus=8)])
    sched = f"s-{p}"
    cfg = ControllerConfig(scheduler_name=sched, namespace=ns, lease_name=f"l-{p}", store_url=f"sqlite:///{path}",
                           inventory_cluster="k4", sync_every_s=1)  # fmt: skip

    def bound(*names: str) -> bool:
        return all(q["spec"].get("nodeName") for q in pods_in(kube, ns) if q["metadata"]["name"] in names)

    locker = sqlite3.connect(path, timeout=0, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # another writer holds the store: every write of the sync waits on it
    try:
        with running_controller(kube, cfg) as ctl:
            assert ctl.store is not None
            names = [f"a{i}" for i in range(3)]
            t0 = time.monotonic()
            for n in names:
                create_pod(kube, ns, pod_body(n, PodRequest(n, 1000, 1024, 1, 1000), sched))
            assert wait_for(lambda: bound(*names), 10)
            took = time.monotonic() - t0
            assert ctl.syncs == 0 and ctl.store.worker.busy("inventory_sync"), ctl.act.audit  # waits on the lock
            locker.execute("ROLLBACK")
            assert wait_for(lambda: ctl.syncs >= 1, 40)
            with engine.begin() as c:  # the cluster leaves the store: each sync now fails
                c.execute(text("delete from nodes where cluster_id = 'k4'"))
                c.execute(text("delete from clusters where id = 'k4'"))
            assert wait_for(
                lambda: any(a["action"] == "inventory_sync" and a["outcome"] == "failed" for a in ctl.act.audit), 10
            )
            create_pod(kube, ns, pod_body("late", PodRequest("late", 1000, 1024, 1, 1000), sched))
            assert wait_for(lambda: bound("late"), 10)
    finally:
        locker.close()
    failed = [a for a in ctl.act.audit if a["action"] == "inventory_sync" and a["outcome"] == "failed"]
    assert failed[0]["reason"] == "store_unavailable" and "'k4' is not in the store" in failed[0]["error"]
    assert took < 10  # bound while the store was held (before this, the loop waited out the sync's busy timeout)
