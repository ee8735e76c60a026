"""Cloud routes: GPU quotas read from the provider and increase requests (AWS Service Quotas, GCP Cloud Quotas,
Azure's compute usages), the price sync into the catalog (AWS, Azure), Capacity Blocks for ML (AWS). Without such a
provider they answer 409 naming the setting."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Path, Query, Response
from pydantic import Field

from gpufleet.api.deps import CurrentActor, ServicesDep
from gpufleet.api.problems import PROBLEM_RESPONSES
from gpufleet.api.schemas import Strict
from gpufleet.api.types import ID_PATTERN, SKU_PATTERN, Id, IdPath, Limit, Offset, PositiveCount, Seconds, SkuId
from gpufleet.domain.errors import ConflictError
from gpufleet.service.auth import ADMINS
from gpufleet.service.bootstrap import Services
from gpufleet.service.capacity_block_requests import BlockStatus
from gpufleet.service.cloud_quotas import CloudQuotaService

router = APIRouter(tags=["cloud"], responses=PROBLEM_RESPONSES)
Region = Annotated[str, Query(pattern=ID_PATTERN, examples=["us-east-1"])]
# a provider's request id (AWS: up to 128 characters): one URL segment, never a path of its own
RequestId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.~:-]{0,127}$")]
T = TypeVar("T")


def _need(service: T | None) -> T:
    if service is None:
        raise ConflictError("the AWS provider is not configured (serve with --provider aws / GPUFLEET_PROVIDER=aws)")
    return service


def _quotas(services: Services) -> CloudQuotaService:
    if services.cloud_quotas is None:
        raise ConflictError(
            "no provider quotas are configured (serve with --provider aws, gcp or azure; GCP with credentials 'none' "
            "also needs GPUFLEET_GCP_QUOTAS_ENDPOINT_URL)"
        )
    return services.cloud_quotas


class IncreaseIn(Strict):
    region: Id
    sku: SkuId
    tier: Literal["on_demand", "spot"] = "on_demand"
    desired_gpus: PositiveCount


class BlockPurchaseIn(Strict):
    offering_id: Id
    region: Id
    sku: SkuId
    gpus: PositiveCount
    duration_h: PositiveCount
    start_after_s: Seconds
    end_before_s: Seconds
    budget_code: Id


class BlockApprovalIn(Strict):
    budget_code: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", examples=["ML-2026-Q1"])]


class BlockRejectIn(Strict):
    reason: Annotated[str, Field(pattern=r"^[^\x00-\x1f]{0,500}$")] = ""


@router.get("/v1/quotas")
def quotas_read(services: ServicesDep, actor: CurrentActor, region: Region) -> Any:
    """The GPU quotas of a region as the provider reports them (AWS: the families' running-instance quotas in
    vCPUs; GCP: GPUs per model), with any open increase request."""
    return _quotas(services).read(actor, region)


@router.post("/v1/quotas/increases", status_code=201)
def quotas_increase(body: IncreaseIn, services: ServicesDep, actor: CurrentActor) -> Any:
    """File an increase that covers ``desired_gpus`` GPUs of the SKU (AWS: converted to vCPUs; GCP: a quota
    preference in GPUs)."""
    return _quotas(services).request_increase(
        actor, region=body.region, sku_id=body.sku, tier=body.tier, desired_gpus=body.desired_gpus
    )


@router.post("/v1/quotas/increases:file-due")
def quotas_file_due(
    services: ServicesDep,
    actor: CurrentActor,
    days: Annotated[int, Query(ge=1, le=730)] = 90,
    increase_lead_days: Annotated[int, Query(ge=0, le=365)] = 14,
) -> Any:
    """File the increase requests the quota outlook drafted and marked due (needs
    GPUFLEET_AWS_FILE_QUOTA_INCREASES or GPUFLEET_GCP_FILE_QUOTA_INCREASES). Admins only, whether or not anything
    is due."""
    actor.require(*ADMINS)  # before the outlook: it reads the provider's quotas, and filing is an admin's write
    quotas = _quotas(services)
    quotas.require_filing()
    setting = f"{quotas.provider}_file_quota_increases"
    if not getattr(services.settings, setting):
        raise ConflictError(
            f"filing drafted quota increases is off (GPUFLEET_{setting.upper()}=false); "
            "file one with POST /v1/quotas/increases"
        )
    outlook = services.quota_outlook.outlook(actor, sku_id=None, days=days, increase_lead_days=increase_lead_days)
    return {"filed": quotas.file_due(actor, outlook)}


@router.get("/v1/quotas/increases/{request_id}")
def quotas_increase_status(request_id: RequestId, services: ServicesDep, actor: CurrentActor, region: Region) -> Any:
    """The status of an increase request at the provider (AWS: PENDING, CASE_OPENED, APPROVED, DENIED, ...; GCP:
    RECONCILING, GRANTED, NOT_GRANTED)."""
    return _quotas(services).increase_status(actor, region, request_id)


@router.get("/v1/capacity-blocks/offerings")
def capacity_block_offerings(
    services: ServicesDep,
    actor: CurrentActor,
    region: Region,
    sku: Annotated[str, Query(pattern=SKU_PATTERN)],
    gpus: Annotated[int, Query(ge=1, le=4096)],
    duration_h: Annotated[int, Query(ge=1, le=182 * 24)],
    start_after_s: Annotated[int, Query(ge=0, le=253_402_300_799)],
    end_before_s: Annotated[int, Query(ge=0, le=253_402_300_799)],
) -> Any:
    """Capacity Block offerings for the SKU's instance type, GPU count (whole instances), duration and dates."""
    offers = _need(services.capacity_blocks).offerings(
        actor,
        region=region,
        sku_id=sku,
        gpus=gpus,
        duration_h=duration_h,
        start_after_s=start_after_s,
        end_before_s=end_before_s,
    )
    return [
        {
            "offering_id": o.offering_id,
            "sku": o.sku_id,
            "instance_type": o.instance_type,
            "availability_zone": o.availability_zone,
            "instance_count": o.instance_count,
            "start_s": o.start_s,
            "end_s": o.end_s,
            "duration_h": o.duration_h,
            "upfront_fee_usd": str(o.upfront_fee_usd),
            "currency": o.currency,
        }
        for o in offers
    ]


@router.post(
    "/v1/capacity-blocks:purchase",
    status_code=201,
    responses={202: {"description": "Above the spend threshold: recorded for two approvers (pending_approval)"}},
)
def capacity_block_purchase(
    body: BlockPurchaseIn, response: Response, services: ServicesDep, actor: CurrentActor
) -> Any:
    """Buy a listed offering (finops_admin; idempotent): within the single-approver threshold at once (201),
    above it recorded for two approvers, a finops_admin and an ml_platform_admin other than the requester (202)."""
    outcome = _need(services.capacity_blocks).purchase(
        actor,
        offering_id=body.offering_id,
        region=body.region,
        sku_id=body.sku,
        gpus=body.gpus,
        duration_h=body.duration_h,
        start_after_s=body.start_after_s,
        end_before_s=body.end_before_s,
        budget_code=body.budget_code,
    )
    if outcome.pending:
        response.status_code = 202
    return outcome.body


@router.get("/v1/capacity-blocks/purchases")
def capacity_block_purchases(
    services: ServicesDep,
    actor: CurrentActor,
    status: Annotated[BlockStatus | None, Query()] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> Any:
    """Capacity Block purchase requests above the threshold (admins, viewer), oldest first, a page of ``limit``
    from ``offset``."""
    return _need(services.capacity_blocks).list(actor, status=status, limit=limit, offset=offset)


@router.get("/v1/capacity-blocks/purchases/{purchase_id}")
def capacity_block_purchase_get(purchase_id: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    return _need(services.capacity_blocks).get(actor, purchase_id)


@router.post("/v1/capacity-blocks/purchases/{purchase_id}/approve")
def capacity_block_purchase_approve(
    purchase_id: IdPath, body: BlockApprovalIn, services: ServicesDep, actor: CurrentActor
) -> Any:
    """Approve (finops_admin or ml_platform_admin, not the requester). The second distinct approval (one of each
    role) re-lists the offering and buys it: ``purchased`` with ``capacity_reservation_id``, or 409 if it is gone."""
    return _need(services.capacity_blocks).approve(actor, purchase_id, budget_code=body.budget_code)


@router.post("/v1/capacity-blocks/purchases/{purchase_id}/reject")
def capacity_block_purchase_reject(
    purchase_id: IdPath, body: BlockRejectIn, services: ServicesDep, actor: CurrentActor
) -> Any:
    return _need(services.capacity_blocks).reject(actor, purchase_id, body.reason)


@router.post("/v1/capacity-blocks/purchases/{purchase_id}/submit")
def capacity_block_purchase_submit(purchase_id: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    """Buy an approved request again after a lost answer or a crash: the purchase key finds the first purchase."""
    return _need(services.capacity_blocks).submit(actor, purchase_id)


@router.post("/v1/catalog/prices:sync")
def catalog_prices_sync(
    services: ServicesDep, actor: CurrentActor, sku: Annotated[str | None, Query(pattern=SKU_PATTERN)] = None
) -> Any:
    """Read on-demand and spot prices from the provider into the catalog's pools (AWS: the Price List API and spot
    price history; Azure: the Retail Prices API; GCP: the Cloud Billing Catalog API)."""
    if services.cloud_catalog is None:
        raise ConflictError(
            "no provider prices are configured (serve with --provider aws, azure or gcp; gcp reads them with "
            "Application Default Credentials or from GPUFLEET_GCP_BILLING_ENDPOINT_URL)"
        )
    return services.cloud_catalog.sync(actor, sku_id=sku)
