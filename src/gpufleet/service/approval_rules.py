"""The approval rules of reservations, decided at APPROVAL time (not at creation):

- **Price**: a reservation is valued at ``max(catalog list price, the pool's price now, the price at creation)``
  per GPU-hour. The catalog's list price (``domain.catalog``: the reserved 1-year list price of the SKU) cannot
  be changed over the API, so lowering a pool's price with ``PATCH`` before creating a reservation and raising
  it again afterwards buys nothing: the approval requirement is taken from the list price. A SKU the built-in
  catalog does not list is valued at the larger of its pool price now and at creation.
- **Quantity**: the GPUs the provider will reserve, not the GPUs proposed: clouds reserve whole machines, so 1 H100
  proposed on AWS, GCP or Azure is valued as the 8-GPU machine bought (``adapters.providers.WholeMachines``; the
  simulated provider reserves the GPUs proposed).
- **Cumulative**: what decides one or two approvals is the requester's cumulative commitments in a rolling
  window (``approval_window_days``, default 30): every reservation of the same requester that was not rejected or
  cancelled and that was created or approved in the window, or is still pending approval with its start not passed
  (now or later: while it may still be approved; however old: halves proposed together and approved a month later
  still see each other), each valued as above, plus this one. Splitting an order under the threshold does not help.
- **Who**: the requester never approves their own reservation (403; an approval they recorded before this rule
  does not count). Above the threshold two distinct people approve: one ``finops_admin`` and one
  ``ml_platform_admin``. People are compared by :func:`identity` (case, Unicode compatibility forms, zero-width
  characters and spacing ignored): ``alice`` and ``Alice `` are one person here, for the requester's window too.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.models import ApprovalRow, PoolRow, ReservationRow
from gpufleet.domain.catalog import PRICES_BY_SKU
from gpufleet.domain.errors import ConflictError
from gpufleet.domain.money import price_to_uusd
from gpufleet.domain.reservations import ReservationStatus, approvals_required, term_seconds
from gpufleet.service.auth import APPROVER_ROLES

S = ReservationStatus
UnitsBought = Callable[[str, int], int]  # (sku, GPUs proposed) -> GPUs the provider reserves
NOT_COMMITTED = (S.REJECTED.value, S.CANCELLED.value)
# A proposal above these is a typo or an attack (2,147,483,647 GPUs; $246 trillion), not a plan.
MAX_UNITS = 100_000
MAX_EST_COST_USD = Decimal("1000000000")  # one billion USD over the term


def identity(user_id: str) -> str:
    """The person a user id names, for the rules that compare people (the requester, two approvers): NFKC
    (full-width letters are letters), without format characters (zero-width spaces), case-folded, runs of spacing as
    one space, trimmed. Tokens are issued per user id, so two spellings of one name must not make two people."""
    text = "".join(ch for ch in unicodedata.normalize("NFKC", user_id) if unicodedata.category(ch) != "Cf")
    return " ".join(text.casefold().split())


def same_person(a: str, b: str) -> bool:
    return identity(a) == identity(b)


def list_price_uusd(sku_id: str) -> int | None:
    """The catalog's reserved list price of the SKU in micro-dollars per GPU-hour (None: not in the catalog)."""
    p = PRICES_BY_SKU.get(sku_id)
    return None if p is None else price_to_uusd(p.reserved_1y)


def approval_price_uusd(sku_id: str, pool_price_uusd: int | None, created_price_uusd: int) -> int:
    """The price a reservation is valued at for approval: never below the list price or what it was priced at."""
    candidates = [created_price_uusd, pool_price_uusd or 0, list_price_uusd(sku_id) or 0]
    return max(candidates)


def cost_cents(units: int, term_months: int, price_uusd: int) -> int:
    """units x term hours x price, in cents (rounded down to the cent like the estimate)."""
    return units * (term_seconds(term_months) // 3600) * price_uusd // 10_000


@dataclass(frozen=True, slots=True)
class ApprovalRequirement:
    approvals_required: int
    this_cost_cents: int  # the reservation (or group) valued at approval time
    window_cost_cents: int  # the requester's other commitments in the window
    window_s: int

    @property
    def cumulative_usd(self) -> Decimal:
        return Decimal(self.this_cost_cents + self.window_cost_cents) / 100

    def detail(self) -> dict[str, object]:
        return {
            "approvals_required": self.approvals_required,
            "valued_usd": str(Decimal(self.this_cost_cents) / 100),
            "requester_window_usd": str(Decimal(self.window_cost_cents) / 100),
            "window_days": self.window_s // 86_400,
        }


def valued_cents(s: Session, rows: Iterable[ReservationRow], bought: UnitsBought | None = None) -> int:
    """Reservations valued at approval prices and at the GPUs ``bought`` says the provider reserves for each (see
    the module docstring), in cents."""
    rows = list(rows)
    pool_ids = sorted({r.pool_id for r in rows})
    if not pool_ids:
        return 0
    prices = dict(s.execute(select(PoolRow.id, PoolRow.price_uusd_per_gpu_h).where(PoolRow.id.in_(pool_ids))).all())
    return sum(
        cost_cents(
            r.units if bought is None else bought(r.sku_id, r.units),
            r.term_months,
            approval_price_uusd(r.sku_id, prices.get(r.pool_id), r.price_uusd_per_gpu_h),
        )
        for r in rows
    )


def requirement(
    s: Session,
    this_cents: int,
    *,
    exclude_ids: Iterable[str],
    requester: str,
    now_s: int,
    window_s: int,
    threshold_usd: Decimal,
    bought: UnitsBought | None = None,
) -> ApprovalRequirement:
    """One or two approvals for a reservation (or the rows of a multi-region one, ``exclude_ids``) valued at
    ``this_cents``, decided now from the requester's other commitments in the window: created or approved in it, or
    pending approval with the start not passed (see the module docstring)."""
    since = now_s - window_s
    approved_since = select(ApprovalRow.reservation_id).where(ApprovalRow.at_s > since)  # a group's on its head
    rows = s.scalars(
        select(ReservationRow).where(
            ReservationRow.status.not_in(NOT_COMMITTED),
            ReservationRow.id.not_in(list(exclude_ids)),
            or_(
                ReservationRow.created_at_s > since,
                # a start equal to now may still be approved (only a start in the past is refused): it is still ahead here
                (ReservationRow.status == S.PENDING_APPROVAL.value) & (ReservationRow.start_s >= now_s),
                func.coalesce(ReservationRow.group_id, ReservationRow.id).in_(approved_since),
            ),
        )
    ).all()
    who = identity(requester)
    window = valued_cents(s, (r for r in rows if identity(r.created_by) == who), bought)
    needed = approvals_required(Decimal(this_cents + window) / 100, threshold_usd)
    return ApprovalRequirement(needed, this_cents, window, window_s)


def split_units(units: int, parts: int) -> list[int]:
    """``units`` split as evenly as possible over ``parts`` regions, the remainder to the first ones."""
    base, extra = divmod(units, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


class _Approval(Protocol):
    user_id: str
    role: str


def check_next_approver(what: str, seen: Sequence[_Approval], user_id: str, role: str, *, two: bool) -> None:
    """The rule on who may add an approval to ``what`` (a reservation, a capacity block purchase), given the
    approvals already ``seen`` (the requester's never counted): never the same user twice; with ``two`` approvals
    needed, one ``finops_admin`` and one ``ml_platform_admin`` (the second of a role already seen is refused).
    Users are compared by :func:`identity`. Raises ConflictError (409) naming ``what``."""
    if any(same_person(a.user_id, user_id) for a in seen):
        raise ConflictError(f"user {user_id!r} has already approved {what}")
    if two and any(a.role == role for a in seen):
        other = next(r.value for r in APPROVER_ROLES if r.value != role)
        raise ConflictError(f"a {role} has already approved {what}; the second approval must come from a {other}")
