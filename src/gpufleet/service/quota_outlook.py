"""The quota outlook (:func:`gpufleet.control.proposing.pool_outlook` over the procurement package's
``quota_outlook``, per provider/region/SKU pool of the on-demand, spot and secondary tiers): the demand a pool
must absorb is the capacity forecast's daily p90 (the same fleet-wide forecast ``GET /v1/capacity/forecast``
serves) above the SKU's committed reservations (active + submitted). Each pool is checked against the whole
spill-over of its SKU (conservative: the case where it all lands in that pool). A SKU planned in several regions
(:mod:`gpufleet.service.plan_regions`) is forecast per plan: each pool against the spill-over of the use of the
plan that reads its region, above that plan region's reservations (``plan_region``; null for a SKU planned in one
region). ``exhausts_at_s`` is the
first day that spill-over exceeds the pool's quota; ``request_by_s`` is that day minus the quota-increase
lead time (``increase_lead_days``, default 14).

With the AWS, GCP or Azure provider configured (``quotas``: :class:`~gpufleet.service.cloud_quotas.CloudQuotaService`),
the quota of that provider's on-demand or spot pool in a configured region is the one read from the provider
(``quota_source``: ``service_quotas`` for AWS, ``cloud_quotas`` for GCP, ``compute_usages`` for Azure), the lead time is the quota's usual
turnaround when past requests show one, and each such pool carries ``increase``: the request drafted by
:func:`gpufleet.procure.quota_increase.draft_increase` (due before the exhaustion date minus the turnaround)
and any open request at the provider. A provider that cannot be read (refused, no answer) leaves the pool on its
stored quota with ``quota_unread`` saying why; the outlook is still answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Engine, select

from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout
from gpufleet.adapters.quota_port import IncreaseRequest
from gpufleet.adapters.sql.models import PoolRow, SkuRow
from gpufleet.control.cloud import draft_increase
from gpufleet.control.proposing import PlanRegion, pool_outlook
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import Tier
from gpufleet.service.auth import Actor
from gpufleet.service.capacity import CapacityService
from gpufleet.service.clock import Clock
from gpufleet.service.cloud_quotas import CloudQuotaService, ProviderQuota
from gpufleet.service.plan_regions import read_plan_map
from gpufleet.service.procurement import HELD_STATUSES, LOOKBACK_DAYS
from gpufleet.service.uow import UnitOfWork

DAY_S = 86400
_QUOTA_TIERS = (Tier.ON_DEMAND.value, Tier.SPOT.value, Tier.SECONDARY.value)
_SOURCE = {
    "aws": "service_quotas",
    "gcp": "cloud_quotas",
    "azure": "compute_usages",
}  # quota_source of a quota read from the provider


class QuotaOutlookService:
    """``GET /v1/quotas/outlook`` (and the cloud quota routes): when each pay-per-use pool's quota runs out."""

    def __init__(
        self, engine: Engine, clock: Clock, capacity: CapacityService, *, quotas: CloudQuotaService | None = None
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._capacity = capacity
        self._quotas = quotas

    def outlook(self, actor: Actor, *, sku_id: str | None, days: int, increase_lead_days: int) -> dict[str, Any]:
        """Each on-demand, spot and secondary pool (of ``sku_id``, or all) against its SKU's ``days``-day forecast
        spill-over (module docstring)."""
        if not 0 <= increase_lead_days <= 365:
            raise ValidationError("increase_lead_days", "must be in 0..365")
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=False) as uow:
            stmt = select(PoolRow).where(PoolRow.tier.in_(_QUOTA_TIERS)).order_by(PoolRow.id)
            if sku_id is not None:
                if uow.session.get(SkuRow, sku_id) is None:
                    raise ValidationError("sku", f"unknown SKU {sku_id!r}")
                stmt = stmt.where(PoolRow.sku_id == sku_id)
            pools = [
                (p.id, p.provider_id, p.region_id, p.sku_id, p.tier, p.quota_gpus) for p in uow.session.scalars(stmt)
            ]
            skus = sorted({p[3] for p in pools})
            plans = read_plan_map(uow.session, now_s // DAY_S * DAY_S, LOOKBACK_DAYS, HELD_STATUSES, skus).regions
        forecasts: dict[tuple[str, str | None], dict[str, Any]] = {}
        out = []
        for pool_id, provider_id, region_id, sku, tier, quota in pools:
            plan = _plan_of(plans.get(sku, ()), region_id)
            key = (sku, None if plan is None else plan.region)
            if key not in forecasts:
                forecasts[key] = self._capacity.forecast(actor, sku_id=sku, days=days, plan=plan)
            fc = forecasts[key]
            p90 = np.array([d["p90"] for d in fc["demand"]])
            committed = np.array([s["committed_units"] for s in fc["supply"]], dtype=np.float64)
            start_s = int(fc["demand"][0]["day_start_s"])
            pq, unread = None, None
            if self._quotas is not None:
                try:
                    pq = self._quotas.pool_quota(provider_id, region_id, sku, tier)
                except (ProviderRefused, ProviderTimeout) as exc:  # a report: the stored quota, and why
                    unread = str(exc)[:300]
            lead_s = increase_lead_days * DAY_S
            if pq is not None:
                quota = pq.quota_gpus
                lead_s = pq.turnaround_s if pq.turnaround_s is not None else lead_s
            o = pool_outlook(
                pool_id,
                p90,
                committed,
                start_s=start_s,
                quota_gpus=None if quota is None else float(quota),
                increase_lead_s=lead_s,
                now_s=now_s,
            )
            extra: dict[str, Any] = {"quota_source": "stored", "increase": None}
            if unread is not None:
                extra["quota_unread"] = unread
            if pq is not None:
                extra = {"quota_source": _SOURCE[provider_id], "increase": _increase(o, pq, tier, now_s, lead_s)}
            out.append(
                {
                    **extra,
                    "pool": pool_id,
                    "plan_region": key[1],
                    "provider": provider_id,
                    "region": region_id,
                    "sku": sku,
                    "tier": tier,
                    "quota_gpus": quota,
                    "peak_demand_gpus": round(o.peak_forecast_gpus, 3),
                    "headroom_gpus_now": None if o.headroom_gpus_now is None else round(o.headroom_gpus_now, 3),
                    "exhausts_at_s": o.exhausts_at_s,
                    "request_by_s": o.request_by_s,
                    "reason": o.reason,
                }
            )
        return {"now_s": now_s, "days": days, "increase_lead_days": increase_lead_days, "pools": out}


def _plan_of(plans: Sequence[PlanRegion], region: str) -> PlanRegion | None:
    """The plan of a SKU planned in several regions that reads the use of ``region`` (exactly one does); None when
    the SKU is planned in one region or none (its whole use then)."""
    if len(plans) < 2:
        return None
    return next(p for p in plans if p.reads(region))


def _increase(o: Any, pq: ProviderQuota, tier: str, now_s: int, lead_s: int) -> dict[str, Any]:
    ref = pq.ref
    open_gpus = None if pq.open_request is None else float(ref.gpus(pq.open_request.desired_value))
    declined = pq.declined_request
    d = draft_increase(
        o,
        now_s=now_s,
        turnaround_s=lead_s,
        gpus_per_instance=ref.gpus_per_machine,
        open_request_gpus=open_gpus,
        declined_request_gpus=None if declined is None else float(ref.gpus(declined.desired_value)),
    )
    return {
        "quota_code": ref.code,
        "quota_name": ref.name,
        "region": pq.region,
        "tier": tier,
        "unit": ref.unit,
        "current_value": pq.value,
        "desired_gpus": d.desired_gpus,
        "desired_value": d.desired_gpus * ref.units_per_gpu,
        "file_by_s": d.file_by_s,
        "turnaround_s": d.turnaround_s,
        "turnaround_source": "provider_history" if pq.turnaround_s is not None else "increase_lead_days",
        "due": d.due,
        "reason": d.reason,
        "open_request": _request_of(pq.open_request),
        "declined_request": _request_of(declined),
    }


def _request_of(r: IncreaseRequest | None) -> dict[str, Any] | None:
    return None if r is None else {"request_id": r.request_id, "status": r.status, "desired_value": r.desired_value}
