"""Fleet routes: capacity forecast, utilization, placement, bin-packing, utilization ingestion, audit log."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import ValidationError as PydanticValidationError
from starlette.concurrency import run_in_threadpool

from gpufleet.api.deps import CurrentActor, ServicesDep
from gpufleet.api.problems import PROBLEM_RESPONSES, field_problem
from gpufleet.api.schemas_fleet import (
    AuditEventPublic,
    BinpackReport,
    CapacityForecast,
    ClusterFeed,
    FleetUtilization,
    IngestResultPublic,
    UtilizationIngest,
)
from gpufleet.api.types import ID_PATTERN, IdPath, SkuQuery, WindowQuery
from gpufleet.domain.errors import GpufleetError, ValidationError
from gpufleet.service.ingest import parse_csv
from gpufleet.service.windows import parse_window_s

router = APIRouter(tags=["fleet"], responses=PROBLEM_RESPONSES)


class UploadTooLarge(GpufleetError):
    """The upload passed ``max_upload_bytes`` while streaming in (413; nothing of it was parsed)."""

    http_status = 413


async def read_limited(request: Request, limit: int) -> bytes:
    """The request body, read chunk by chunk and refused as soon as it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise UploadTooLarge(f"body: upload over {limit} bytes (GPUFLEET_MAX_UPLOAD_BYTES); send smaller batches")
        chunks.append(chunk)
    return b"".join(chunks)


@router.get("/v1/capacity/forecast", response_model=CapacityForecast)
def capacity_forecast(
    services: ServicesDep,
    actor: CurrentActor,
    sku: SkuQuery,
    days: Annotated[int, Query(ge=1, le=730)] = 90,
    region: Annotated[str | None, Query(pattern=ID_PATTERN, examples=["eu-north1"])] = None,
) -> Any:
    """Daily demand quantiles against supply (reservations and quotas), the gap and a backtested confidence;
    ``region``: demand from utilization records whose pool is in the region, that region's supply."""
    return services.capacity.forecast(actor, sku_id=sku, days=days, region=region)


@router.get("/v1/fleet/utilization", response_model=FleetUtilization)
def fleet_utilization(
    request: Request,
    services: ServicesDep,
    actor: CurrentActor,
    sku: SkuQuery,
    window: WindowQuery = "7d",
    region: Annotated[str | None, Query(pattern=ID_PATTERN, examples=["us-east-1"])] = None,
) -> Any:
    """Utilization of a SKU (optionally in one region: records that name a pool there) and its idle waste: the
    one definition of docs/api.md (held-but-unbusy + paid-but-unallocated GPU time, at the price paid)."""
    window_s = parse_window_s(window)
    out, pool_ids = services.usage.fleet_utilization(actor, sku_id=sku, window_s=window_s, region=region)
    out.update(request.app.state.finops.idle_waste(window_s, sku_id=sku, pool_ids=pool_ids))
    return out


@router.get("/v1/clusters/{cluster}/feed", response_model=ClusterFeed)
def cluster_feed(cluster: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    """What the cluster's controller has fed the store: its last inventory sync and its last metered hour, each ok,
    stale or never (service/cluster_feed.py)."""
    return services.cluster_feed.feed(actor, cluster)


@router.get("/v1/clusters/{cluster}/binpack", response_model=BinpackReport)
def cluster_binpack(cluster: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:
    return services.binpack.report(actor, cluster)


@router.post(
    "/v1/utilization:ingest",
    response_model=IngestResultPublic,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/UtilizationIngest"}},
                "text/csv": {"schema": {"type": "string"}},
            },
        }
    },
)
async def ingest_utilization(request: Request, services: ServicesDep, actor: CurrentActor) -> Any:
    """Bulk utilization records as JSON ``{"records": [...]}`` or CSV (header row with the same names).
    Idempotent per (source, bucket_start_s, workload_id): re-sent records replace, never double count."""
    raw = await read_limited(request, services.settings.max_upload_bytes)
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError("body", "must be UTF-8") from None
    if ctype == "text/csv":
        records = parse_csv(text)
    elif ctype in ("application/json", ""):
        try:
            body = UtilizationIngest.model_validate_json(text or "null")
        except PydanticValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in first["loc"]).replace(".[", "[")
            raise ValidationError(field or "body", first["msg"]) from None
        records = [r.model_dump() for r in body.records]
    else:
        return field_problem(
            415, "content-type", f"send the body as application/json or text/csv, got {ctype!r}", request
        )
    result = await run_in_threadpool(services.ingest.ingest, actor, records)
    return {"received": result.received, "inserted": result.inserted, "updated": result.updated}


@router.get("/v1/audit", response_model=list[AuditEventPublic])
def audit_log(
    services: ServicesDep,
    actor: CurrentActor,
    entity_id: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}$")] = None,
    action: Annotated[str | None, Query(pattern=r"^[a-z_.]{1,64}$")] = None,
    after_id: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    """The append-only audit log, oldest first; page with ``after_id``."""
    return services.audit.list(actor, entity_id=entity_id, action=action, after_id=after_id, limit=limit)
