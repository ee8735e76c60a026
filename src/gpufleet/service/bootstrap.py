"""The one bootstrap: settings -> engine -> services. Nothing here runs at import time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from gpufleet.adapters.providers import ProviderPort, SimulatedProvider
from gpufleet.adapters.sql.engine import make_engine, safe_url
from gpufleet.adapters.sql.migrate import RevisionWatch, ensure_migrated
from gpufleet.service.accuracy import ForecastAccuracyService
from gpufleet.service.audit import AuditService
from gpufleet.service.auth import Authenticator
from gpufleet.service.autoscaling import AutoscalingService
from gpufleet.service.binpack import BinpackService
from gpufleet.service.budgets import BudgetService
from gpufleet.service.capacity import CapacityService
from gpufleet.service.clock import Clock, IdGenerator, RandomIds, SystemClock
from gpufleet.service.cluster_feed import ClusterFeedService
from gpufleet.service.ingest import IngestService
from gpufleet.service.leader import Leadership, election_for
from gpufleet.service.placement_chain import ChainPlacementService
from gpufleet.service.planned_runs import PlannedRunService
from gpufleet.service.procurement import ProcurementService
from gpufleet.service.quota_outlook import QuotaOutlookService
from gpufleet.service.reconciler import Reconciler
from gpufleet.service.registry import RegistryService
from gpufleet.service.reservation_orders import CrashHook
from gpufleet.service.reservations import ReservationService
from gpufleet.service.settings import Settings
from gpufleet.service.usage import UsageService
from gpufleet.service.workloads import WorkloadService

if TYPE_CHECKING:  # boto3 is imported only when the AWS provider is configured
    from gpufleet.adapters.aws.world import AwsWorld
    from gpufleet.service.capacity_blocks import CapacityBlockService
    from gpufleet.service.cloud_catalog import CloudCatalogService
    from gpufleet.service.cloud_quotas import CloudQuotaService


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
    cluster_feed: ClusterFeedService
    ingest: IngestService
    audit: AuditService
    accuracy: ForecastAccuracyService
    procurement: ProcurementService
    quota_outlook: QuotaOutlookService
    autoscaling: AutoscalingService
    budgets: BudgetService
    planned_runs: PlannedRunService
    leader: Leadership
    reconciler: Reconciler
    # the store's schema revision, re-read by the leader loop before it acts (checked at start by build_services)
    revision: RevisionWatch
    # with ``provider = aws`` (None with the simulated provider)
    aws: AwsWorld | None = None
    cloud_quotas: CloudQuotaService | None = None
    capacity_blocks: CapacityBlockService | None = None
    cloud_catalog: CloudCatalogService | None = None


def build_services(
    settings: Settings,
    *,
    engine: Engine | None = None,
    clock: Clock | None = None,
    ids: IdGenerator | None = None,
    provider: ProviderPort | None = None,
    crash_hook: CrashHook | None = None,
    on_dry_run: Callable[[Any], None] | None = None,
    leader: Leadership | None = None,
) -> Services:
    """Wire everything; raises DatabaseNotMigrated (with the fixing command) on an unmigrated database.

    ``settings.provider == "aws"`` wires the AWS adapters (the provider port over EC2 capacity reservations,
    Service Quotas for the quota outlook, Capacity Blocks, prices), ``"gcp"`` the provider port over Compute Engine
    reservations, Cloud Quotas for the quota outlook and the Cloud Billing Catalog's prices (adapters/gcp), ``"azure"`` the provider port over capacity
    reservations, its compute quotas for the quota outlook and its retail prices (adapters/azure); ``on_dry_run``
    receives each AWS call a dry run would have made (``settings.aws_dry_run``). ``leader``: who may submit to the
    provider (default: the advisory lock on PostgreSQL, this process on SQLite)."""
    engine = engine or make_engine(
        settings.db_url,
        busy_timeout_s=settings.sqlite_busy_timeout_s,
        connect_timeout_s=settings.db_connect_timeout_s,
        statement_timeout_s=settings.db_statement_timeout_s,
    )
    ensure_migrated(engine, safe_url=safe_url(engine))
    clock = clock or SystemClock()
    ids = ids or RandomIds()
    cloud: dict[str, Any] = {}
    if settings.provider == "aws":
        cloud = _aws(settings, engine, clock, ids, on_dry_run)
        provider = provider or cloud["aws"].reservations
    elif settings.provider == "azure":
        cloud = _azure(settings, engine, clock)
        azure_reservations = cloud.pop("azure_reservations")
        provider = provider or azure_reservations
    elif settings.provider == "gcp":
        cloud = _gcp(settings, engine, clock)
        gcp_reservations = cloud.pop("gcp_reservations")
        provider = provider or gcp_reservations
    provider = provider or SimulatedProvider(engine, latency_s=settings.sim_provider_latency_s)
    leader = leader or election_for(engine, poll_s=settings.leader_poll_s)
    revision = RevisionWatch(engine)
    workloads = WorkloadService(engine, clock, ids)
    budgets = BudgetService(engine, clock)
    accuracy = ForecastAccuracyService(engine, clock, ingest_grace_h=settings.ingest_grace_h)
    capacity = CapacityService(engine, clock, recorder=accuracy.record, ingest_grace_h=settings.ingest_grace_h)
    reservations = ReservationService(
        engine,
        clock,
        ids,
        provider,
        approval_threshold_usd=settings.approval_threshold_usd,
        provider_max_attempts=settings.provider_max_attempts,
        crash_hook=crash_hook,
        # not while the store was last seen at another schema revision: the leader loop has stepped down then
        may_submit=lambda: revision.off is None and leader.is_leader(),
        approval_window_s=settings.approval_window_days * 86_400,
    )
    binpack = BinpackService(engine, clock)
    procurement = ProcurementService(engine, clock, capacity, reservations, ingest_grace_h=settings.ingest_grace_h)
    reconciler = Reconciler(
        engine,
        clock,
        reservations=reservations,
        capacity=capacity,
        procurement=procurement,
        binpack=binpack,
        capacity_blocks=cloud.get("capacity_blocks"),
        leads=leader.refresh,
        epoch=leader.epoch,
        retry_s=settings.plan_retry_s,
        deadline_s=settings.plan_pass_deadline_s,
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
        placement=ChainPlacementService(
            engine,
            clock,
            budgets,
            signal_max_age_s=settings.placement_signal_max_age_s,
            preemption_hold_s=settings.placement_preemption_hold_s,
            admission_key_retention_s=settings.placement_admission_key_retention_s,
        ),
        binpack=binpack,
        cluster_feed=ClusterFeedService(engine, clock),
        ingest=IngestService(engine, clock),
        audit=AuditService(engine),
        accuracy=accuracy,
        procurement=procurement,
        quota_outlook=QuotaOutlookService(engine, clock, capacity, quotas=cloud.get("cloud_quotas")),
        autoscaling=AutoscalingService(engine, workloads),
        budgets=budgets,
        planned_runs=PlannedRunService(engine, clock, ids),
        **cloud,
        leader=leader,
        reconciler=reconciler,
        revision=revision,
    )


def _gcp(settings: Settings, engine: Engine, clock: Clock) -> dict[str, Any]:
    from gpufleet.adapters.gcp.prices import GcpCatalogPrices
    from gpufleet.adapters.gcp.quotas import GcpCloudQuotas
    from gpufleet.adapters.gcp.reservations import GcpReservations
    from gpufleet.adapters.gcp.session import BILLING_URL, QUOTAS_URL, GcpConfig, GoogleApi, token_source
    from gpufleet.service.cloud_catalog import CloudCatalogService
    from gpufleet.service.cloud_quotas import CloudQuotaService

    config = GcpConfig(
        project=settings.gcp_project or "",
        regions=tuple(settings.gcp_regions),
        zones=dict(settings.gcp_zones),
        endpoint_url=settings.gcp_endpoint_url,
        quotas_endpoint_url=settings.gcp_quotas_endpoint_url,
        billing_endpoint_url=settings.gcp_billing_endpoint_url,
        credentials=settings.gcp_credentials,
        read_timeout_s=settings.provider_timeout_s,
        max_attempts=settings.gcp_max_attempts,
    )
    token = token_source(config)
    out: dict[str, Any] = {
        "gcp_reservations": GcpReservations(
            GoogleApi(config, token=token),
            now_s=clock.now_s,
            specific_reservation_required=settings.gcp_specific_reservation_required,
            op_wait_s=settings.gcp_operation_wait_s,
        )
    }
    if config.credentials == "adc" or config.quotas_endpoint_url:  # never Google without credentials
        quotas = GcpCloudQuotas(
            GoogleApi(config, root=config.quotas_endpoint_url or QUOTAS_URL, token=token),
            contact_email=settings.gcp_quota_contact_email,
        )
        out["cloud_quotas"] = CloudQuotaService(engine, clock, quotas, cache_s=settings.gcp_quota_cache_s)
    if config.credentials == "adc" or config.billing_endpoint_url:  # the Cloud Billing Catalog, same token
        prices = GcpCatalogPrices(GoogleApi(config, root=config.billing_endpoint_url or BILLING_URL, token=token))
        out["cloud_catalog"] = CloudCatalogService(engine, clock, prices)
    return out


def _azure(settings: Settings, engine: Engine, clock: Clock) -> dict[str, Any]:
    from gpufleet.adapters.azure.prices import AzureRetailPrices
    from gpufleet.adapters.azure.quotas import AzureComputeQuotas
    from gpufleet.adapters.azure.reservations import AzureCapacityReservations
    from gpufleet.adapters.azure.session import ArmApi, AzureConfig
    from gpufleet.service.cloud_catalog import CloudCatalogService
    from gpufleet.service.cloud_quotas import CloudQuotaService

    config = AzureConfig(
        subscription_id=settings.azure_subscription_id or "",
        resource_group=settings.azure_resource_group or "",
        regions=tuple(settings.azure_regions),
        zones=dict(settings.azure_zones),
        endpoint_url=settings.azure_endpoint_url,
        credentials=settings.azure_credentials,
        read_timeout_s=settings.provider_timeout_s,
        max_attempts=settings.azure_max_attempts,
    )
    api = ArmApi(config)
    quotas = AzureComputeQuotas(api)
    prices = AzureRetailPrices(
        config.regions,
        url=settings.azure_prices_url,
        timeout_s=settings.provider_timeout_s,
        max_attempts=settings.azure_max_attempts,
    )
    return {
        "azure_reservations": AzureCapacityReservations(api, now_s=clock.now_s),
        "cloud_quotas": CloudQuotaService(engine, clock, quotas, cache_s=settings.azure_quota_cache_s),
        "cloud_catalog": CloudCatalogService(engine, clock, prices),
    }


def _aws(
    settings: Settings, engine: Engine, clock: Clock, ids: IdGenerator, on_dry_run: Callable[[Any], None] | None
) -> dict[str, Any]:
    from gpufleet.adapters.aws.session import AwsConfig
    from gpufleet.adapters.aws.world import aws_world
    from gpufleet.service.capacity_blocks import CapacityBlockService
    from gpufleet.service.cloud_catalog import CloudCatalogService
    from gpufleet.service.cloud_quotas import CloudQuotaService

    config = AwsConfig(
        regions=tuple(settings.aws_regions),
        account_ids=tuple(settings.aws_account_ids),
        profile=settings.aws_profile,
        endpoint_url=settings.aws_endpoint_url,
        availability_zones=dict(settings.aws_availability_zones),
        read_timeout_s=settings.provider_timeout_s,
        max_attempts=settings.aws_max_attempts,
        dry_run=settings.aws_dry_run,
    )
    world = aws_world(
        config, now_s=clock.now_s, on_dry_run=on_dry_run, match_criteria=settings.aws_instance_match_criteria
    )
    return {
        "aws": world,
        "cloud_quotas": CloudQuotaService(engine, clock, world.quotas, cache_s=settings.aws_quota_cache_s),
        "capacity_blocks": CapacityBlockService(
            engine,
            clock,
            world,
            threshold_usd=settings.approval_threshold_usd,
            ids=ids,
            window_s=settings.approval_window_days * 86_400,
        ),
        "cloud_catalog": CloudCatalogService(engine, clock, world.prices),
    }
