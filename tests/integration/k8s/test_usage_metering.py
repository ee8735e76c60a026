"""The controller meters the GPUs its cluster's workloads hold into the store's hourly utilization records, with
the pool of each node's region, SKU and capacity type and the DCGM utilization read from a real Prometheus, against
a real API server; the store's planning map then plans each region on its own use."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import PoolRow, TeamRow, TenantRow, UtilizationRow, WorkloadRow
from gpufleet.control.loop import ControlLoop
from gpufleet.control.proposing import PlanRegion
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import PodRequest
from gpufleet.service.auth import Actor, Role
from gpufleet.service.capacity import CapacityService
from gpufleet.service.clock import FixedClock
from gpufleet.service.ingest import IngestService
from gpufleet.service.plan_regions import read_plan_map
from gpufleet.service.procurement import ProcurementService
from tests.integration import promserver
from tests.integration.k8s.helpers import create_pod, pod_body, wait_for

T0 = 1_764_547_200  # 2025-12-01T00:00Z, an hour's start
H = 3600
SKU = "h100_80gb"


def _openmetrics(ns: str, pods: dict[str, float]) -> str:
    """DCGM_FI_DEV_GPU_UTIL (percent) of each pod's one device, every 15 s over the hour and a little after."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for i, (pod, pct) in enumerate(pods.items()):
        for k in range((H + 600) // 15):
            lines.append(f'DCGM_FI_DEV_GPU_UTIL{{namespace="{ns}",pod="{pod}",Hostname="h",gpu="{i}"}} {pct} '
                         f"{T0 + 15 * k}")  # fmt: skip
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as c:
        c.execute(text("insert into clusters (id, name, region_id) values ('k3', 'k3', 'us-east-1')"))
    with Session(engine) as s, s.begin():  # us-west-2 gets a reserved and an on-demand pool (us-east-1 is seeded)
        for tier, price in (("reserved", 4_361_900), ("on_demand", 6_880_000)):
            s.add(PoolRow(id=f"aws/us-west-2/{SKU}/{tier}", provider_id="aws", region_id="us-west-2", sku_id=SKU,
                          tier=tier, price_uusd_per_gpu_h=price, term_months=12 if tier == "reserved" else 0))  # fmt: skip
    yield url
    engine.dispose()


def test_the_controller_meters_each_workloads_gpus_per_hour_into_the_store(
    kube: Kube, kubelet: FakeKubelet, ns: str, tmp_path: Path, store: str
) -> None:
    if not promserver.available():
        pytest.skip(promserver.SKIP_REASON)
    p = f"u{uuid.uuid4().hex[:5]}"
    kubelet.register([
        FakeNode(f"{p}-east", zone="us-east-1a", capacity_type="on-demand"),
        FakeNode(f"{p}-west", zone="us-west-2a", capacity_type="on-demand"),
        FakeNode(f"{p}-spot", zone="us-west-2b", capacity_type="spot"),  # no spot pool stored: no pool
    ])  # fmt: skip
    placed = {"train-e": (f"{p}-east", 4, 60.0), "serve-w": (f"{p}-west", 2, 30.0), "spot-w": (f"{p}-spot", 1, 90.0),
              "dark-e": (f"{p}-east", 2, -1.0), "theirs-e": (f"{p}-east", 1, 50.0)}  # fmt: skip
    # serve-w is the service's registered serving workload wl-serve (team ml); theirs-e names wl-other, registered
    # to another team: the store refuses that record (one team's workload is not billed to another), the rest land
    ids = {"serve-w": "wl-serve", "theirs-e": "wl-other"}
    for name, (node, gpus, _) in placed.items():
        ann = {"gpufleet.io/workload-id": ids[name]} if name in ids else {}
        body = pod_body(name, PodRequest("x", 1000, 1024, gpus, 1000), "none", labels={"gpufleet.io/team": "ml"},
                        annotations=ann)  # fmt: skip
        body["spec"]["nodeName"] = node
        create_pod(kube, ns, body)
    engine = make_engine(store)
    with Session(engine) as s, s.begin():
        for team in ("ml", "other"):
            s.add(TeamRow(id=team, name=team))
            s.add(TenantRow(id=f"{team}-t", name=team, team_id=team))
        for wid, team in (("wl-serve", "ml"), ("wl-other", "other")):
            s.add(WorkloadRow(id=wid, name=wid, image="x", kind="serving", cpu=1.0, mem_gb=1.0, gpus=1, gpu_sku=SKU,
                              min_replicas=1, max_replicas=4, scale_metric="rps", team_id=team,
                              tenant_id=f"{team}-t", priority="normal", created_at_s=T0))  # fmt: skip
    ingest = IngestService(engine, FixedClock(T0 + 2 * H))
    calls: list[int] = []

    def sink(records: Sequence[dict[str, object]]) -> tuple[int, list[str]]:
        calls.append(len(records))
        return ingest.ingest_leaving_out(Actor("controller", Role.ML_PLATFORM_ADMIN, None), records)

    util = {name: pct for name, (_, _, pct) in placed.items() if pct >= 0}
    clock = [float(T0)]
    with promserver.prometheus_over(tmp_path, _openmetrics(ns, util)) as url:
        cfg = ControllerConfig(scheduler_name=f"s-{p}", namespace=ns, lease_name=f"l-{p}", store_url=store,
                               inventory_cluster="k3", prometheus_url=url, meter_every_s=60)  # fmt: skip
        ctl = Controller(kube, cfg, clock=lambda: clock[0], usage_sink=sink).start()
        try:
            assert wait_for(lambda: len([q for q in ctl.view.observation().pods if q.namespace == ns]) == 5, 20)
            for k in range(H // 60 + 3):  # a reading a minute for the hour, then two more minutes: the hour is due
                clock[0] = T0 + 60 * k
                ctl.maybe_meter()
        finally:
            ctl.stop()
    assert calls and ctl.metering is not None and not ctl.metering.failures
    (hour,) = ctl.metering.written
    assert hour.start_s == T0 and hour.util_unmeasured_gpu_h == pytest.approx(2.0, abs=0.1)  # dark-e: no DCGM
    (refused,) = hour.refused
    assert "wl-other" in refused and "belongs to team 'other'" in refused
    with Session(engine) as s:
        rows = {r.workload_id: r for r in s.scalars(select(UtilizationRow).where(UtilizationRow.bucket_start_s == T0))}
    mine = {w.split(":", 1)[1]: r for w, r in rows.items() if w.startswith(f"{ns}:")}
    assert set(mine) == {"train-e", "spot-w", "dark-e"} and "wl-other" not in rows
    e, w, sp, dark = mine["train-e"], rows["wl-serve"], mine["spot-w"], mine["dark-e"]
    assert (dark.pool_id, dark.gpus_allocated, dark.gpu_util) == (f"aws/us-east-1/{SKU}/on_demand", 2.0, None)
    assert (e.pool_id, e.gpus_allocated, e.gpu_util, e.bucket_s) == (f"aws/us-east-1/{SKU}/on_demand", 4.0, 0.6, H)
    assert (w.pool_id, w.gpus_allocated, w.gpu_util) == (f"aws/us-west-2/{SKU}/on_demand", 2.0, 0.3)
    assert (sp.pool_id, sp.source, sp.gpus_allocated) == (None, f"k8s:k3:{SKU}", 1.0)
    assert e.source == f"k8s:k3:us-east-1:{SKU}:on_demand" and e.team_id == "ml" and e.sku_id == SKU
    # the planning pass of the next day reads them: each region with a reserved pool plans its own use
    with Session(engine) as s:
        m = read_plan_map(s, T0 + 86_400, 28, ("pending_approval", "approved", "submitted", "active"), [SKU])
    assert m.regions[SKU] == (
        PlanRegion("us-east-1", "most_used_region", excluded=("us-west-2",)),
        PlanRegion("us-west-2", "used_region", own_only=True),
    )
    # and the west's context carries the registered serving workload's GPUs for the stock-out cover
    day = FixedClock(T0 + 86_400)
    procurement = ProcurementService(engine, day, CapacityService(engine, day), None)  # type: ignore[arg-type]
    ctx, _ = procurement.context(SKU, "us-west-2", ControlLoop.gpufleet(0), forecast_h=24)
    assert ctx.serving_asks_gpus is not None and list(ctx.serving_asks_gpus) == [2.0] + [0.0] * 23
    assert list(ctx.demand_history_gpus) == [2.0] + [0.0] * 23  # the west reads its own use only


def test_metering_needs_the_store(kube: Kube, ns: str) -> None:
    with pytest.raises(ValidationError) as got:
        Controller(kube, ControllerConfig(namespace=ns, meter_every_s=60, prometheus_url="http://127.0.0.1:1"))
    assert got.value.field == "--db/--cluster"
    # without Prometheus the meter writes its records with the utilization not measured
    ctl = Controller(kube, ControllerConfig(namespace=ns, meter_every_s=60, store_url="sqlite://", inventory_cluster="k"),
                     usage_sink=lambda r: (len(r), []))  # fmt: skip
    assert ctl.metering is not None and not ctl.metering.measures_utilization
