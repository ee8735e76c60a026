"""Quotas read from the provider (AWS Service Quotas) for the quota outlook, and increase requests.

Contract: ``pool_quota`` answers for AWS pools of the on-demand and spot tiers in the configured regions only
(None otherwise: the stored quota stays in force). Readings are reused for ``cache_s`` seconds of the injected
clock, and dropped for a region when an increase is filed there. GPUs = family vCPU quota // vCPUs per GPU of
the SKU's instance type (the P and G quotas are shared by every SKU of the family). ``turnaround_s`` is the
median created -> last-update time of the quota's closed (approved or closed) requests, None without any.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from gpufleet.adapters.aws.skus import QUOTA_BY_CODE, gpus_from_vcpus, instance_type, quota_code
from gpufleet.adapters.sql.models import SkuRow
from gpufleet.control.cloud import usual_turnaround_s
from gpufleet.domain.errors import ValidationError
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork

if TYPE_CHECKING:  # boto3 is imported only when the AWS provider is configured
    from gpufleet.adapters.aws.quotas import IncreaseRequest, QuotaReading
    from gpufleet.adapters.aws.world import AwsWorld

_TIERS = ("on_demand", "spot")
_CLOSED = ("APPROVED", "CASE_CLOSED")


@dataclass(frozen=True, slots=True)
class ProviderQuota:
    region: str
    code: str
    name: str
    value_vcpus: float
    quota_gpus: int
    open_request: IncreaseRequest | None
    turnaround_s: int | None


class CloudQuotaService:
    def __init__(self, engine: Engine, clock: Clock, world: AwsWorld, *, cache_s: float) -> None:
        self._engine = engine
        self._clock = clock
        self._world = world
        self._cache_s = cache_s
        self._lock = threading.Lock()
        self._readings: dict[str, tuple[int, dict[str, QuotaReading]]] = {}
        self._requests: dict[tuple[str, str], tuple[int, list[IncreaseRequest]]] = {}

    @property
    def regions(self) -> tuple[str, ...]:
        return self._world.config.regions

    def _fresh(self, at_s: int) -> bool:
        return self._clock.now_s() - at_s < self._cache_s

    def readings(self, region: str) -> dict[str, QuotaReading]:
        with self._lock:
            hit = self._readings.get(region)
            if hit is not None and self._fresh(hit[0]):
                return hit[1]
        got = {q.code: q for q in self._world.quotas.read(region)}
        with self._lock:
            self._readings[region] = (self._clock.now_s(), got)
        return got

    def requests(self, region: str, code: str) -> list[IncreaseRequest]:
        with self._lock:
            hit = self._requests.get((region, code))
            if hit is not None and self._fresh(hit[0]):
                return hit[1]
        got = self._world.quotas.requests(region, code)
        with self._lock:
            self._requests[(region, code)] = (self._clock.now_s(), got)
        return got

    def pool_quota(self, provider_id: str, region: str, sku_id: str, tier: str) -> ProviderQuota | None:
        if provider_id != "aws" or tier not in _TIERS or region not in self.regions:
            return None
        code = quota_code(sku_id, tier).code
        reading = self.readings(region).get(code)
        if reading is None:
            return None
        history = self.requests(region, code)
        open_requests = [r for r in history if r.open]
        closed = [
            r.updated_s - r.created_s
            for r in history
            if r.status in _CLOSED and r.created_s is not None and r.updated_s is not None
        ]
        return ProviderQuota(
            region,
            code,
            reading.name,
            reading.value_vcpus,
            gpus_from_vcpus(sku_id, reading.value_vcpus),
            open_requests[-1] if open_requests else None,
            usual_turnaround_s(closed, -1) if closed else None,
        )

    # ---- the API's use cases ------------------------------------------------------------------------------
    def read(self, actor: Actor, region: str) -> dict[str, Any]:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)
        self._region(region)
        out = []
        for r in self.readings(region).values():
            open_reqs = [q for q in self.requests(region, r.code) if q.open]
            out.append(
                {
                    "code": r.code,
                    "name": r.name,
                    "family": r.family,
                    "tier": r.tier,
                    "value_vcpus": r.value_vcpus,
                    "open_request": _request(open_reqs[-1]) if open_reqs else None,
                }
            )
        return {"provider": "aws", "region": region, "quotas": out}

    def file_due(self, actor: Actor, outlook: dict[str, Any]) -> list[dict[str, Any]]:
        """File every increase the outlook marks due (one per quota code and region: the largest need)."""
        wanted: dict[tuple[str, str], tuple[float, int, str, str]] = {}
        for pool in outlook["pools"]:
            inc = pool.get("increase")
            if not inc or not inc["due"]:
                continue
            key = (inc["region"], inc["quota_code"])
            if key not in wanted or inc["desired_vcpus"] > wanted[key][0]:
                wanted[key] = (inc["desired_vcpus"], inc["desired_gpus"], pool["sku"], inc["tier"])
        return [
            self.request_increase(actor, region=region, sku_id=sku, tier=tier, desired_gpus=gpus, reason="outlook")
            for (region, _code), (_vcpus, gpus, sku, tier) in sorted(wanted.items())
        ]

    def request_increase(
        self, actor: Actor, *, region: str, sku_id: str, tier: str, desired_gpus: int, reason: str = "requested"
    ) -> dict[str, Any]:
        """File a Service Quotas increase to cover ``desired_gpus`` of the SKU (as the family's vCPUs)."""
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN)
        self._region(region)
        with UnitOfWork(self._engine, write=False) as uow:
            if uow.session.get(SkuRow, sku_id) is None:
                raise ValidationError("sku", f"unknown SKU {sku_id!r}")
        if tier not in _TIERS:
            raise ValidationError("tier", f"must be one of {', '.join(_TIERS)}, got {tier!r}")
        if desired_gpus <= 0:
            raise ValidationError("desired_gpus", f"must be > 0, got {desired_gpus}")
        code = quota_code(sku_id, tier).code
        desired_vcpus = float(desired_gpus * instance_type(sku_id).vcpus_per_gpu)
        current = self.readings(region).get(code)
        if current is not None and desired_vcpus <= current.value_vcpus:
            raise ValidationError(
                "desired_gpus",
                f"{desired_gpus} GPUs ({desired_vcpus:g} vCPUs) is not above the current quota "
                f"of {current.value_vcpus:g} vCPUs ({code})",
            )
        filed = self._world.quotas.request_increase(region, code, desired_vcpus)
        with self._lock:
            self._readings.pop(region, None)
            self._requests.pop((region, code), None)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="quota.increase_requested",
                entity="quota",
                entity_id=f"aws/{region}/{code}",
                detail={
                    "request_id": filed.request_id,
                    "desired_vcpus": desired_vcpus,
                    "sku": sku_id,
                    "reason": reason,
                },
            )
            uow.commit()
        return _request(filed)

    def increase_status(self, actor: Actor, region: str, request_id: str) -> dict[str, Any]:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)
        self._region(region)
        got = self._world.quotas.request_status(region, request_id)
        with self._lock:
            self._requests.pop((region, got.code), None)
            if got.status in _CLOSED:
                self._readings.pop(region, None)
        return _request(got)

    def _region(self, region: str) -> None:
        if region not in self.regions:
            raise ValidationError("region", f"{region!r} is not a configured AWS region ({', '.join(self.regions)})")


def _request(r: IncreaseRequest) -> dict[str, Any]:
    q = QUOTA_BY_CODE.get(r.code)
    return {
        "request_id": r.request_id,
        "region": r.region,
        "code": r.code,
        "name": None if q is None else q.name,
        "desired_vcpus": r.desired_vcpus,
        "status": r.status,
        "open": r.open,
        "created_s": r.created_s,
        "updated_s": r.updated_s,
    }
