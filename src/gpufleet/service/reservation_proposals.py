"""What a reservation proposal must be before it is stored: sane sizes and dates, one reserved pool per listed
region, and the fingerprint its Idempotency-Key is bound to (the same key with another proposal is refused)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.models import PoolRow
from gpufleet.domain.errors import ConflictError, ValidationError
from gpufleet.domain.pools import Tier
from gpufleet.domain.reservations import MAX_START_AHEAD_S, TERMS_MONTHS
from gpufleet.service import approval_rules as rules

if TYPE_CHECKING:
    from gpufleet.service.reservation_rows import ReservationView


def proposal_fingerprint(sku_id: str, units: int, start_s: int, term_months: int, regions: Sequence[str]) -> str:
    """What an Idempotency-Key is bound to: the normalized proposal."""
    body = json.dumps([sku_id, units, start_s, term_months, list(regions)], separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


def check_proposal(units: int, start_s: int, term_months: int, regions: Sequence[str], now_s: int) -> None:
    if units <= 0:
        raise ValidationError("units", f"must be > 0, got {units}")
    if units > rules.MAX_UNITS:
        raise ValidationError("units", f"must be at most {rules.MAX_UNITS:,} GPUs per reservation, got {units:,}")
    if term_months not in TERMS_MONTHS:
        raise ValidationError("term_months", f"must be one of {sorted(TERMS_MONTHS)}, got {term_months}")
    if start_s < now_s:
        raise ValidationError("start", "must not be in the past")
    if start_s - now_s > MAX_START_AHEAD_S:
        days = MAX_START_AHEAD_S // 86_400
        raise ValidationError("start", f"must be at most {days} days (ten years) ahead of now")
    if not regions:
        raise ValidationError("regions", "name at least one region")
    for i, region_id in enumerate(regions):
        if region_id in regions[:i]:
            raise ValidationError(f"regions[{i}]", f"region {region_id!r} is listed twice")
    if units < len(regions):
        raise ValidationError("units", f"{units} units cannot be split across {len(regions)} regions")


def same_proposal(prior: ReservationView, fingerprint: str, client_key: str) -> ReservationView:
    first = prior.request_fingerprint or proposal_fingerprint(  # a reservation from before revision 0008
        prior.sku_id, prior.units, prior.start_s, prior.term_months, [r for r, _ in prior.regions]
    )
    if first != fingerprint:
        raise ConflictError(
            f"Idempotency-Key {client_key!r} was already used for reservation {prior.id} with a different "
            "proposal; use a new key for a new proposal"
        )
    return prior


def reserved_pools(s: Session, sku_id: str, regions: Sequence[str]) -> list[PoolRow]:
    """The cheapest reserved pool of the SKU in each listed region (each region must have one)."""
    rows = s.scalars(
        select(PoolRow).where(
            PoolRow.sku_id == sku_id, PoolRow.tier == Tier.RESERVED.value, PoolRow.region_id.in_(list(regions))
        )
    ).all()
    by_region: dict[str, PoolRow] = {}
    for r in sorted(rows, key=lambda r: (r.price_uusd_per_gpu_h, r.id)):
        by_region.setdefault(r.region_id, r)
    missing = [i for i, region_id in enumerate(regions) if region_id not in by_region]
    if missing:
        i = missing[0]
        raise ValidationError(f"regions[{i}]", f"no reserved pool for {sku_id} in {regions[i]}")
    return [by_region[r] for r in regions]
