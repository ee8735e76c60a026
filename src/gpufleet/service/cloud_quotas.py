"""Quotas read from the provider (the cloud quota port: AWS Service Quotas, GCP Cloud Quotas) for the quota
outlook, and increase requests.

Contract: ``pool_quota`` answers for the provider's own pools (``provider`` = the source's) of the on-demand and
spot tiers in the configured regions only (None otherwise: the stored quota stays in force). Readings are reused
for ``cache_s`` seconds of the injected clock, and dropped for a region when an increase is filed there. GPUs =
the quota's value // its units per GPU (AWS: the family's vCPU quota // vCPUs per GPU of the SKU's instance type,
shared by every SKU of the family; GCP: GPUs). ``turnaround_s`` is the median time the provider took to decide
the quota's past requests (AWS: created -> last update of approved or closed ones), None without any.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout
from gpufleet.adapters.quota_port import CloudQuotas, IncreaseRequest, QuotaReading, QuotaRef
from gpufleet.adapters.sql.models import SkuRow
from gpufleet.control.cloud import usual_turnaround_s
from gpufleet.domain.errors import ConflictError, ValidationError
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork

_TIERS = ("on_demand", "spot")


@dataclass(frozen=True, slots=True)
class ProviderQuota:
    region: str
    ref: QuotaRef
    value: float  # in the quota's unit
    quota_gpus: int
    open_request: IncreaseRequest | None
    turnaround_s: int | None
    declined_request: IncreaseRequest | None = None  # the last decided request, when the provider declined it


class CloudQuotaService:
    def __init__(self, engine: Engine, clock: Clock, source: CloudQuotas, *, cache_s: float) -> None:
        self._engine = engine
        self._clock = clock
        self._source = source
        self._cache_s = cache_s
        self._lock = threading.Lock()
        self._readings: dict[str, tuple[int, dict[str, QuotaReading] | ProviderRefused | ProviderTimeout]] = {}
        self._requests: dict[tuple[str, str], tuple[int, list[IncreaseRequest]]] = {}
        self._gen: Counter[Any] = Counter()  # per region and per (region, code): bumped by every drop

    @property
    def provider(self) -> str:
        return self._source.provider

    @property
    def regions(self) -> tuple[str, ...]:
        return self._source.regions

    def _fresh(self, at_s: int) -> bool:
        return self._clock.now_s() - at_s < self._cache_s

    def readings(self, region: str) -> dict[str, QuotaReading]:
        """The region's readings, reused for ``cache_s``; a failed read is remembered as long (each pool of an
        outlook would otherwise wait out the provider's timeouts again) and raised again. A read that was under way
        when the region's cache was dropped (an increase filed or closed) is answered but not kept."""
        with self._lock:
            hit = self._readings.get(region)
            if hit is not None and self._fresh(hit[0]):
                if isinstance(hit[1], Exception):
                    raise hit[1]
                return hit[1]
            gen = self._gen[region]
        try:
            got = {q.code: q for q in self._source.read(region)}
        except (ProviderRefused, ProviderTimeout) as exc:
            self._keep(self._readings, region, (self._clock.now_s(), exc), gen)
            raise
        self._keep(self._readings, region, (self._clock.now_s(), got), gen)
        return got

    def requests(self, region: str, code: str) -> list[IncreaseRequest]:
        with self._lock:
            hit = self._requests.get((region, code))
            if hit is not None and self._fresh(hit[0]):
                return hit[1]
            gen = self._gen[(region, code)]
        got = self._source.requests(region, code)
        self._keep(self._requests, (region, code), (self._clock.now_s(), got), gen)
        return got

    def _keep(self, cache: dict[Any, Any], key: Any, value: Any, gen: int) -> None:
        with self._lock:
            if self._gen[key] == gen:  # not dropped while it was being read
                cache[key] = value

    def _drop(self, region: str, code: str, *, readings: bool) -> None:
        with self._lock:
            self._requests.pop((region, code), None)
            self._gen[(region, code)] += 1
            if readings:
                self._readings.pop(region, None)
                self._gen[region] += 1

    def pool_quota(self, provider_id: str, region: str, sku_id: str, tier: str) -> ProviderQuota | None:
        if provider_id != self.provider or tier not in _TIERS or region not in self.regions:
            return None
        ref = self._source.quota_for(sku_id, tier)
        reading = None if ref is None else self.readings(region).get(ref.code)
        if ref is None or reading is None:
            return None
        history = self.requests(region, ref.code)
        open_requests = [r for r in history if r.open]
        decided = [r for r in history if not r.open]
        took = [r.turnaround_s for r in history if r.turnaround_s is not None]
        return ProviderQuota(
            region,
            ref,
            reading.value,
            ref.gpus(reading.value),
            open_requests[-1] if open_requests else None,
            usual_turnaround_s(took, -1) if took else None,
            decided[-1] if decided and decided[-1].declined else None,
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
                    "unit": self._source.unit,
                    "value": r.value,
                    "open_request": self._request(open_reqs[-1]) if open_reqs else None,
                }
            )
        return {"provider": self.provider, "region": region, "quotas": out}

    def file_due(self, actor: Actor, outlook: dict[str, Any]) -> list[dict[str, Any]]:
        """File every increase the outlook marks due (one per quota code and region: the largest need)."""
        wanted: dict[tuple[str, str], tuple[float, int, str, str]] = {}
        for pool in outlook["pools"]:
            inc = pool.get("increase")
            if not inc or not inc["due"]:
                continue
            key = (inc["region"], inc["quota_code"])
            if key not in wanted or inc["desired_value"] > wanted[key][0]:
                wanted[key] = (inc["desired_value"], inc["desired_gpus"], pool["sku"], inc["tier"])
        return [
            self.request_increase(actor, region=region, sku_id=sku, tier=tier, desired_gpus=gpus, reason="outlook")
            for (region, _code), (_value, gpus, sku, tier) in sorted(wanted.items())
        ]

    def request_increase(
        self, actor: Actor, *, region: str, sku_id: str, tier: str, desired_gpus: int, reason: str = "requested"
    ) -> dict[str, Any]:
        """File an increase that covers ``desired_gpus`` of the SKU (in the quota's unit: AWS vCPUs, GCP GPUs)."""
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN)
        self.require_filing()
        self._region(region)
        with UnitOfWork(self._engine, write=False) as uow:
            if uow.session.get(SkuRow, sku_id) is None:
                raise ValidationError("sku", f"unknown SKU {sku_id!r}")
        if tier not in _TIERS:
            raise ValidationError("tier", f"must be one of {', '.join(_TIERS)}, got {tier!r}")
        if desired_gpus <= 0:
            raise ValidationError("desired_gpus", f"must be > 0, got {desired_gpus}")
        ref = self._source.quota_for(sku_id, tier)
        if ref is None:
            raise ValidationError("sku", f"no {self.provider} quota is mapped for SKU {sku_id!r} ({tier})")
        desired = float(desired_gpus * ref.units_per_gpu)
        current = self.readings(region).get(ref.code)
        if current is not None and desired <= current.value:
            raise ValidationError(
                "desired_gpus",
                f"{desired_gpus} GPUs ({desired:g} {ref.unit}) is not above the current quota "
                f"of {current.value:g} {ref.unit} ({ref.code})",
            )
        filed = self._source.request_increase(region, ref.code, desired, reason=reason)
        self._drop(region, ref.code, readings=True)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="quota.increase_requested",
                entity="quota",
                entity_id=f"{self.provider}/{region}/{ref.code}",
                detail={
                    "request_id": filed.request_id,
                    "desired_value": desired,
                    "unit": ref.unit,
                    "sku": sku_id,
                    "reason": reason,
                },
            )
            uow.commit()
        return self._request(filed)

    def increase_status(self, actor: Actor, region: str, request_id: str) -> dict[str, Any]:
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.VIEWER)
        self.require_filing()
        self._region(region)
        got = self._source.request_status(region, request_id)
        self._drop(got.region, got.code, readings=not got.open)
        return self._request(got)

    def require_filing(self) -> None:
        if not self._source.files_increases:
            raise ConflictError(
                f"quota increases are not filed through gpufleet for {self.provider}: the outlook drafts them "
                "(GET /v1/quotas/outlook); file them with the provider"
            )

    def _region(self, region: str) -> None:
        if region not in self.regions:
            raise ValidationError(
                "region", f"{region!r} is not a configured {self.provider} region ({', '.join(self.regions)})"
            )

    def _request(self, r: IncreaseRequest) -> dict[str, Any]:
        return _request(r, self._source.unit)


def _request(r: IncreaseRequest, unit: str) -> dict[str, Any]:
    return {
        "request_id": r.request_id,
        "region": r.region,
        "code": r.code,
        "unit": unit,
        "desired_value": r.desired_value,
        "status": r.status,
        "open": r.open,
        "created_s": r.created_s,
        "updated_s": r.updated_s,
    }
