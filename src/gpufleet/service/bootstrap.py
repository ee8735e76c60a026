"""The one bootstrap: settings -> engine -> services. Nothing here runs at import time."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from gpufleet.adapters.providers import ProviderPort, SimulatedProvider
from gpufleet.adapters.sql.engine import make_engine, safe_url
from gpufleet.adapters.sql.migrate import ensure_migrated
from gpufleet.service.accuracy import ForecastAccuracyService
from gpufleet.service.audit import AuditService
from gpufleet.service.auth import Authenticator
from gpufleet.service.autoscaling import AutoscalingService
from gpufleet.service.binpack import BinpackService
from gpufleet.service.budgets import BudgetService
from gpufleet.service.capacity import CapacityService
from gpufleet.service.clock import Clock, IdGenerator, RandomIds, SystemClock
from gpufleet.service.ingest import IngestService
from gpufleet.service.placement_chain import ChainPlacementService
from gpufleet.service.procurement import ProcurementService
from gpufleet.service.registry import RegistryService
from gpufleet.service.reservations import CrashHook, ReservationService
from gpufleet.service.settings import Settings
from gpufleet.service.usage import UsageService
from gpufleet.service.workloads import WorkloadService


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    engine: Engine
    clock: Clock
    provider: ProviderPort
    auth: Authenticator
    reservations: ReservationService
    registry: RegistryService
    workloads: WorkloadService
    usage: UsageService
    capacity: CapacityService
    placement: ChainPlacementService
    binpack: BinpackService
    ingest: IngestService
    audit: AuditService
    accuracy: ForecastAccuracyService
    procurement: ProcurementService
    autoscaling: AutoscalingService
    budgets: BudgetService


def build_services(
    settings: Settings,
    *,
    engine: Engine | None = None,
    clock: Clock | None = None,
    ids: IdGenerator | None = None,
    provider: ProviderPort | None = None,
    crash_hook: CrashHook | None = None,
) -> Services:
    """Wire everything; raises DatabaseNotMigrated (with the fixing command) on an unmigrated database."""
    engine = engine or make_engine(settings.db_url, busy_timeout_s=settings.sqlite_busy_timeout_s)
    ensure_migrated(engine, safe_url=safe_url(engine))
    clock = clock or SystemClock()
    ids = ids or RandomIds()
    provider = provider or SimulatedProvider(engine)
    workloads = WorkloadService(engine, clock, ids)
    budgets = BudgetService(engine, clock)
    accuracy = ForecastAccuracyService(engine, clock)
    capacity = CapacityService(engine, clock, recorder=accuracy.record)
    reservations = ReservationService(
        engine,
        clock,
        ids,
        provider,
        approval_threshold_usd=settings.approval_threshold_usd,
        provider_max_attempts=settings.provider_max_attempts,
        crash_hook=crash_hook,
        approval_window_s=settings.approval_window_days * 86_400,
    )
    return Services(
        settings=settings,
        engine=engine,
        clock=clock,
        provider=provider,
        auth=Authenticator(engine, cache_s=settings.token_cache_s, clock=clock),
        reservations=reservations,
        registry=RegistryService(engine, clock),
        workloads=workloads,
        usage=UsageService(engine, clock, workloads),
        capacity=capacity,
        placement=ChainPlacementService(engine, clock, budgets),
        binpack=BinpackService(engine, clock),
        ingest=IngestService(engine, clock),
        audit=AuditService(engine),
        accuracy=accuracy,
        procurement=ProcurementService(engine, clock, capacity, reservations),
        autoscaling=AutoscalingService(engine, workloads),
        budgets=budgets,
    )
