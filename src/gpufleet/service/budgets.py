"""Team budgets, enforced when work is admitted (placement): the budget stage of the admission pipeline.

A team has at most one budget: ``limit_usd`` per calendar ``period`` (UTC day, ISO week or month), ``enforce``
and ``alert_at`` thresholds. What the team has spent in the current window is

    metered   = GPU-hours held in the window (utilization rows, ``gpus_allocated x bucket_s``, every source's rows
                added up: two sources are two holdings) priced (``control.metering.Meter.held_units``) at the
                pay-per-use pool a row names (on-demand, spot, secondary), as the FinOps books charge it, and at the
                SKU's cheapest on-demand pool when it names none, an unknown pool or a reserved one, each at the
                price of its moment (``service/pool_prices.py``: a price change does not re-price the past). It ignores
                reservations, so a team riding reserved capacity is charged more here than in its chargeback:
                admission errs on the side of not overrunning.
    committed = what work admitted earlier is still expected to spend in the window from now on (its rate x the
                rest of its expected run inside the window; the part before now is metered, not committed).

A request's expected spend is its pool's price x GPUs x its expected run inside the window (``expected_run_s``;
0 = until the window ends; at most ``MAX_EXPECTED_RUN_S``, 366 days, else a ValidationError naming it). A run that
goes on past the window is checked in each later window it reaches too (at most ``MAX_BUDGET_WINDOWS`` in all),
against what admitted work is committed to spend there. The control loop's admission pipeline decides
(:func:`gpufleet.control.admission.decide_budget`, over ``cost.budgets.admit``): admit, degrade (the request's first
declared degrade option that fits in every window it touches, placed and priced) or queue until the first window
that refuses ends. Never a silent overrun, never a drop.
Each decision on a budgeted team is appended to the audit log (``budget.admission``) and admitted or degraded
work is recorded as a commitment, in one transaction that holds the budget row's lock (PostgreSQL) or the
write lock (SQLite), so concurrent requests cannot both take the last dollars. A booking may carry a ``claim``
(the placement's: take the GPUs of the option admitted in its pool, re-checking the pool's room) run in that same
transaction; the pools the batch's claims may name are locked first, in id order. A claim that finds no room left
answers :class:`CapacityTaken` for that request and books nothing for it.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, Engine, bindparam, case, func, select
from sqlalchemy.orm import aliased

from gpufleet.adapters.sql.models import (
    BudgetCommitmentRow,
    PoolPriceRow,
    PoolRow,
    TeamBudgetRow,
    TeamRow,
    UtilizationRow,
)
from gpufleet.control.admission import (
    BUDGET_PERIODS,
    AdmissionOutcome,
    Budget,
    PricedOption,
    budget_report,
    budget_windows,
    decide_budget,
    expected_units,
    run_end_s,
    team_budget,
    usd,
)
from gpufleet.control.metering import Meter
from gpufleet.domain.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.domain.pools import Tier
from gpufleet.service.auth import ADMINS, Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.group_commit import GroupCommit
from gpufleet.service.pool_prices import price_history
from gpufleet.service.uow import UnitOfWork

DEFAULT_ALERT_AT = (0.5, 0.8, 1.0)
READERS = (*ADMINS, Role.VIEWER, Role.APP_TEAM)
SUBMITTERS = (*ADMINS, Role.APP_TEAM)  # roles that may submit work, and so book spend against a budget
MAX_EXPECTED_RUN_S = 366 * 86_400  # the longest expected run admission books (0 = until the window ends)


__all__ = ["AdmissionOutcome", "Booked", "BudgetService", "CapacityTaken", "Claim", "PricedOption", "usd"]

# (the booking's transaction, the option admitted) -> whether its GPUs were taken in its pool and its victims promised
# to it (False: no room left, or a victim promised to another admission)
Claim = Callable[[UnitOfWork, PricedOption], bool]
# (the booking's transaction, the outcome, the id of the commitment booked or None) -> None: called for a booking whose
# claim took its GPUs, once its outcome is known and before the transaction commits (the placement records its answer)
Booked = Callable[[UnitOfWork, AdmissionOutcome, int | None], None]


class CapacityTaken(ConflictError):
    """The pool a placement chose has no room left for it any more (a concurrent admission took it): decide again."""


@dataclass(frozen=True, slots=True)
class _Ask:
    actor: Actor
    preferred: PricedOption
    degrade: tuple[PricedOption, ...]
    expected_run_s: int
    context: dict[str, Any]
    named: bool
    claim: Claim | None = None
    booked: Booked | None = None


class BudgetService:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock
        self._bookings: GroupCommit[_Ask, AdmissionOutcome | None] = GroupCommit(self._decide)
        # statements built once with bound parameters (building them per request costs more than running them)
        cheapest_on_demand = (
            select(func.min(PoolRow.price_uusd_per_gpu_h))
            .where(PoolRow.tier == Tier.ON_DEMAND.value, PoolRow.sku_id == UtilizationRow.sku_id)
            .scalar_subquery()
        )
        # a record that names a pay-per-use pool is priced at that pool (what the books charge it); one that names
        # none, an unknown pool or a reserved one (reservations are ignored here) at the SKU's cheapest on-demand
        named = aliased(PoolRow)
        price = case(
            (named.tier.is_not(None) & (named.tier != Tier.RESERVED.value), named.price_uusd_per_gpu_h),
            else_=cheapest_on_demand,
        )
        self._held = (  # GPU-seconds per (SKU, price) in [since, until): one round trip
            select(UtilizationRow.sku_id, func.sum(UtilizationRow.gpus_allocated * UtilizationRow.bucket_s), price)
            .outerjoin(named, named.id == UtilizationRow.pool_id)
            .where(
                UtilizationRow.team_id == bindparam("team"),
                UtilizationRow.bucket_start_s >= bindparam("since", type_=BigInteger),
                UtilizationRow.bucket_start_s < bindparam("until", type_=BigInteger),
            )
            .group_by(UtilizationRow.sku_id, price)
        )
        self._changed = select(PoolPriceRow.until_s).where(PoolPriceRow.until_s > bindparam("since")).limit(1)
        # committed_units() in SQL: rate x the part of each commitment inside [ws, we), summed; the current
        # window's committed spend is [now, window end) (the part before now is metered), a later window's all of it
        ws, we = bindparam("ws", type_=BigInteger), bindparam("we", type_=BigInteger)
        c = BudgetCommitmentRow
        lo = case((c.start_s > ws, c.start_s), else_=ws)
        hi = case((c.end_s < we, c.end_s), else_=we)
        self._committed = select(func.sum(case((hi > lo, c.rate_uusd_per_h * (hi - lo)), else_=0))).where(
            c.team_id == bindparam("team"), c.end_s > ws
        )

    # ---- the budget itself ----------------------------------------------------------------------------------
    def set(
        self,
        actor: Actor,
        team_id: str,
        *,
        limit_usd: Decimal,
        period: str,
        enforce: bool,
        alert_at: Sequence[float] = DEFAULT_ALERT_AT,
    ) -> dict[str, Any]:
        actor.require(*ADMINS)
        if period not in BUDGET_PERIODS:
            raise ValidationError("period", f"must be one of {', '.join(BUDGET_PERIODS)}, got {period!r}")
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            if uow.session.get(TeamRow, team_id) is None:
                raise NotFoundError("team", team_id)
            values = {
                "limit_cents": int((limit_usd * 100).to_integral_value()),
                "period": period,
                "enforce": enforce,
                "alert_at_json": json.dumps(sorted(set(alert_at))),
                "updated_at_s": now_s,
                "updated_by": actor.user_id,
            }
            # one statement, so that concurrent first PUTs for a team cannot all INSERT: the last one wins
            stmt = uow.insert(TeamBudgetRow).values(team_id=team_id, version=1, **values)
            stmt = stmt.on_conflict_do_update(
                index_elements=["team_id"], set_={**values, "version": TeamBudgetRow.version + 1}
            )
            uow.session.execute(stmt)
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="budget.set",
                entity="team",
                entity_id=team_id,
                detail={"limit_usd": str(limit_usd), "period": period, "enforce": enforce, "alert_at": alert_at},
            )
            uow.commit()
        return self.status(actor, team_id)

    def delete(self, actor: Actor, team_id: str) -> None:
        actor.require(*ADMINS)
        with UnitOfWork(self._engine, write=True) as uow:
            row = uow.session.get(TeamBudgetRow, team_id)
            if row is None:
                raise NotFoundError("budget of team", team_id)
            uow.session.delete(row)
            uow.audit(
                at_s=self._clock.now_s(),
                actor=actor.user_id,
                action="budget.deleted",
                entity="team",
                entity_id=team_id,
                detail={},
            )
            uow.commit()

    def status(self, actor: Actor, team_id: str) -> dict[str, Any]:
        """The budget with the window's figures and alerts (404 when the team has none)."""
        actor.require(*READERS)
        actor.require_team(team_id)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.get(TeamBudgetRow, team_id)
            if row is None:
                raise NotFoundError("budget of team", team_id)
            budget, metered, committed = self._figures(uow, row, now_s)
        return self._body(row, budget, metered, committed, now_s)

    # ---- admission --------------------------------------------------------------------------------------------
    def admit_placement(
        self,
        actor: Actor,
        team_id: str,
        *,
        preferred: PricedOption,
        degrade: Sequence[PricedOption],
        expected_run_s: int,
        context: dict[str, Any],
        named: bool = True,
        book: bool = True,
        claim: Claim | None = None,
        booked: Booked | None = None,
    ) -> AdmissionOutcome | None:
        """Admission of one placement for a team; None when the team has no budget (nothing to enforce).
        A ``named`` team (in the request) must exist; a team taken from an app_team token need not.

        ``book``: record the admitted spend as a commitment and audit the decision; only roles that may submit
        work (admins; app_team for its own team) may book. Bookings of one team are group-committed
        (:mod:`gpufleet.service.group_commit`): decided one after the other under the budget row's lock, several
        per transaction. Without ``book`` the decision is a preview: read-only, nothing recorded, so a viewer (or
        anyone asking for a recommendation) cannot spend a budget.

        ``claim`` (booking only): called in the booking's transaction for the option admitted (its pool and GPUs)
        before anything is recorded; when it returns False the request gets :class:`CapacityTaken` and nothing is
        booked for it. ``booked`` (with ``claim``): called in that transaction once the claim took the GPUs and the
        outcome is booked, with the outcome and the commitment's id (None: no spend committed), before the commit:
        what it writes commits with the booking, or not at all."""
        actor.require_team(team_id)
        if isinstance(expected_run_s, bool) or not 0 <= expected_run_s <= MAX_EXPECTED_RUN_S:
            raise ValidationError(
                "expected_run_s", f"must be in 0..{MAX_EXPECTED_RUN_S} seconds (366 days), got {expected_run_s}"
            )
        ask = _Ask(
            actor,
            preferred,
            tuple(degrade),
            expected_run_s,
            context,
            named,
            claim if book else None,
            booked if book else None,
        )
        if book:
            actor.require(*SUBMITTERS)
            return self._bookings.submit(team_id, ask)
        out = self._decide(team_id, [ask], book=False)[0]
        if isinstance(out, BaseException):
            raise out
        return out

    def _decide(
        self, team_id: str, asks: Sequence[_Ask], *, book: bool = True
    ) -> list[AdmissionOutcome | BaseException | None]:
        """Decide ``asks`` in order in one transaction (holding the budget row's lock when booking)."""
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=book) as uow:
            stmt = select(TeamBudgetRow).where(TeamBudgetRow.team_id == team_id)
            row = uow.session.execute(uow.lock(stmt) if book else stmt).scalar()
            if row is None:
                exists = uow.session.get(TeamRow, team_id) is not None
                return [ValidationError("team", f"unknown team {team_id!r}") if a.named and not exists else None
                        for a in asks]  # fmt: skip
            budget, metered, committed = self._figures(uow, row, now_s)
            window = (budget.window_start_s, budget.window_end_s)
            claimable = sorted({o.pool_id for a in asks if a.claim is not None for o in (a.preferred, *a.degrade)
                                if o.pool_id is not None})  # fmt: skip
            if book and claimable:  # row locks in one order: two batches claiming the same pools cannot deadlock
                uow.session.execute(uow.lock(select(PoolRow.id).where(PoolRow.id.in_(claimable)).order_by(PoolRow.id)))
            # the later windows the asks' runs reach (at most MAX_BUDGET_WINDOWS in all) and what is committed there
            last_end = max(run_end_s(budget, a.expected_run_s, now_s) for a in asks)
            later = {w: self._committed_in(uow, team_id, w) for w in budget_windows(row.period, now_s, last_end)[1:]}
            out: list[AdmissionOutcome | BaseException | None] = []
            pools: dict[str, bool] = {}  # pool id -> it still exists (held against a delete until commit)
            for a in asks:
                call = decide_budget(budget, metered + committed, a.preferred, a.degrade,
                                     expected_run_s=a.expected_run_s, workload_id=a.context.get("workload_id", "-"),
                                     now_s=now_s, later=later)  # fmt: skip
                decision = call.decision
                pool_id = call.chosen.pool_id if book and call.chosen is not None else None
                if pool_id is not None and not self._pool_held(uow, pool_id, pools):
                    # the placement read its pools before this transaction: one deleted since is not booked
                    out.append(ConflictError(f"pool {pool_id!r} was deleted while the placement was decided; retry"))
                    continue
                if not self._claimed(uow, a, pool_id, call.chosen):  # the pool's room went to a concurrent admission
                    out.append(CapacityTaken(f"pool {pool_id!r} has no room left for this placement; decide again"))
                    continue
                body = self._body(row, budget, metered, committed, now_s)
                body.update(
                    action=decision.action.value,
                    reason=decision.reason,
                    option=decision.option,
                    request_usd=usd(call.request_units),
                    admitted_usd=None if call.chosen is None else usd(call.admitted_units),
                    retry_at_s=decision.retry_at_s,
                    expected_end_s=min(call.end_s, window[1]),
                    booked=book,
                )
                outcome = AdmissionOutcome(decision.action, decision.option, body)
                out.append(outcome)
                if not book:
                    continue
                rate = call.rate_uusd_per_h
                commitment: BudgetCommitmentRow | None = None
                if call.chosen is not None and rate > 0:
                    commitment = BudgetCommitmentRow(
                        team_id=team_id,
                        created_at_s=now_s,
                        start_s=now_s,
                        end_s=call.end_s,
                        rate_uusd_per_h=rate,
                        action=decision.action.value,
                        pool_id=call.chosen.pool_id,
                    )
                    uow.session.add(commitment)  # fmt: skip
                    committed += call.admitted_units  # what the next decision sees, in each window
                    for w in later:
                        later[w] += expected_units(rate, now_s, call.end_s, w)
                if a.booked is not None and a.claim is not None and pool_id is not None:
                    if commitment is not None:
                        uow.session.flush()  # its id, for the placement's record
                    a.booked(uow, outcome, None if commitment is None else commitment.id)
                uow.audit(at_s=now_s, actor=a.actor.user_id, action="budget.admission", entity="team",
                          entity_id=team_id, detail={**body, **a.context})  # fmt: skip
            if book:
                uow.commit()
        return out

    # ---- helpers ------------------------------------------------------------------------------------------------
    @staticmethod
    def _claimed(uow: UnitOfWork, ask: _Ask, pool_id: str | None, chosen: PricedOption | None) -> bool:
        """Whether the ask's claim took the admitted option's GPUs in its pool (True: nothing to claim)."""
        if ask.claim is None or pool_id is None or chosen is None:
            return True
        return ask.claim(uow, chosen)

    @staticmethod
    def _pool_held(uow: UnitOfWork, pool_id: str, seen: dict[str, bool]) -> bool:
        """Whether the pool a booking names still exists, holding it until commit (``FOR KEY SHARE`` on PostgreSQL:
        a concurrent delete waits and then finds the commitment; SQLite's write lock serializes them already)."""
        got = seen.get(pool_id)
        if got is None:
            stmt = uow.lock(select(PoolRow.id).where(PoolRow.id == pool_id), key_share=True)
            got = seen[pool_id] = uow.session.scalar(stmt) is not None
        return got

    def _figures(self, uow: UnitOfWork, row: TeamBudgetRow, now_s: int) -> tuple[Budget, int, int]:
        budget = team_budget(row.team_id, limit_cents=row.limit_cents, period=row.period,
                             alert_at=json.loads(row.alert_at_json), enforce=row.enforce, now_s=now_s)  # fmt: skip
        window = (budget.window_start_s, budget.window_end_s)
        s = uow.session
        since, until = window[0], min(now_s, window[1])
        if s.scalar(self._changed, {"since": since}) is None:  # no price changed since: the one-statement sum
            held = s.execute(self._held, {"team": row.team_id, "since": since, "until": until})
            metered = sum(Meter.held_units(gpu_s or 0, price or 0) for _sku, gpu_s, price in held.all())
        else:
            metered = self._metered_at_past_prices(uow, row.team_id, since, until)
        return budget, metered, self._committed_in(uow, row.team_id, (now_s, window[1]))

    def _committed_in(self, uow: UnitOfWork, team_id: str, span: tuple[int, int]) -> int:
        """What admitted work is committed to spend in [span[0], span[1])."""
        return int(uow.session.scalar(self._committed, {"team": team_id, "ws": span[0], "we": span[1]}) or 0)

    @staticmethod
    def _metered_at_past_prices(uow: UnitOfWork, team_id: str, since: int, until: int) -> int:
        """What ``_held`` sums, with each record charged at the prices of its moment (a record that spans a price
        change is split at it): a record naming a pay-per-use pool at that pool's price, any other at the SKU's
        cheapest on-demand pool then (nothing when the SKU has none)."""
        history = price_history(uow, since)
        rows = uow.session.execute(
            select(UtilizationRow.sku_id, UtilizationRow.pool_id, UtilizationRow.bucket_start_s,
                   UtilizationRow.bucket_s, UtilizationRow.gpus_allocated)
            .where(UtilizationRow.team_id == team_id, UtilizationRow.bucket_start_s >= since,
                   UtilizationRow.bucket_start_s < until)
        ).all()  # fmt: skip
        gpu_s: dict[tuple[str, int], float] = defaultdict(float)
        for sku, pool_id, start, length, gpus in rows:
            pool = history.pools.get(pool_id) if pool_id is not None else None
            edges = [start, *history.cuts(sku, start, start + length), start + length]
            for a, b in itertools.pairwise(edges):
                if pool is not None and pool.tier is not Tier.RESERVED:
                    price = pool.at(a)
                else:
                    cheapest = history.cheapest_on_demand(sku, a)
                    price = 0 if cheapest is None else cheapest[1]
                gpu_s[(sku, price)] += gpus * (b - a)
        return sum(Meter.held_units(v, price) for (_sku, price), v in gpu_s.items())

    @staticmethod
    def _body(row: TeamBudgetRow, budget: Budget, metered: int, committed: int, now_s: int) -> dict[str, Any]:
        return {
            "team": row.team_id,
            "period": row.period,
            "enforce": row.enforce,
            "limit_usd": Decimal(row.limit_cents) / 100,
            **budget_report(budget, metered, committed, now_s),
            "version": row.version,
        }
