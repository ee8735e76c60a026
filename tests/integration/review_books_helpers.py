"""Shared set-up for the books review tests: the service layer (no HTTP) over a migrated store."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.providers import SimulatedProvider
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.clock import FixedClock, RandomIds
from gpufleet.service.finops import FinOpsService
from gpufleet.service.settings import Settings
from tests.integration.conftest import Database

ADMIN = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
VIEWER = Actor("vic", Role.VIEWER, None)
OD_POOL = "aws/us-east-1/h100_80gb/on_demand"  # 6.88 $/GPU-h in the migrated store
SPOT_POOL = "nebius/eu-north1/h100_80gb/spot"
H = 3600
DAY = 86_400


def services(db: Database, now_s: int) -> tuple[Services, FixedClock, FinOpsService]:
    clock = FixedClock(now_s)
    svc = build_services(
        Settings(db_url=db.url, reconcile_interval_s=0, token_cache_s=0),
        engine=db.engine,
        clock=clock,
        provider=SimulatedProvider(db.engine),
    )
    return svc, clock, FinOpsService(db.engine, clock, RandomIds(), cache_s=0)


def team(svc: Services, team_id: str) -> None:
    svc.registry.create(ADMIN, "team", {"id": team_id, "name": team_id})
    svc.registry.create(ADMIN, "tenant", {"id": f"{team_id}-prod", "name": "prod", "team_id": team_id})


def rec(source: str, start_s: int, bucket_s: int, workload: str, team_id: str, gpus: float, *,
        util: float | None = 0.5, pool: str | None = OD_POOL) -> dict[str, Any]:  # fmt: skip
    return {"source": source, "bucket_start_s": start_s, "bucket_s": bucket_s, "workload_id": workload,
            "team_id": team_id, "sku_id": "h100_80gb", "gpus_allocated": gpus, "gpu_util": util, "pool_id": pool}  # fmt: skip
