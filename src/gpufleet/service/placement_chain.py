"""Placement with graceful degradation over stored pools, decided by the control loop's admission pipeline
(:class:`gpufleet.control.admission.AdmissionPipeline`: place -> budget; the degrade chain is the code the
simulator's placement runs).

This module turns stored rows into the pipeline's :class:`~gpufleet.control.admission.PoolHeadroom`:

- capacity of a pool: GPUs of active reservations in it (+ its quota, if any) for the reserved tier, its
  quota for the others (no quota = unbounded); in use = the pool's ``allocated_gpus``;
  free = capacity - in use; utilization = in use / capacity (0 for an unbounded pool).
- ``stockout`` and ``queue_wait_s`` come from ``pool_signals`` (``PUT /v1/placement/signals``: what a
  provider adapter or an operator reports); a pool without a row has no stockout and no wait estimate, and so has
  a pool whose signal is older than ``signal_max_age_s`` (the setting ``placement_signal_max_age_s``, 6 hours by
  default): a reporter that stopped reporting leaves no stock-out flag steering placement forever.
- preemption candidates are the running work the caller lists (the service does not yet track which pool
  each running workload sits in), less the work promised to an earlier admission (:mod:`placement_victims`).
- the budget stage is :meth:`gpufleet.service.budgets.BudgetService.admit_placement` (the team's budget row,
  locked while booking), handed to the pipeline as its budget gate. The service keeps no team quotas, so the
  pipeline's quota stage passes (``no_quota``).

The answer keeps the original shape ``{region, pool, tier, reason, fallback, skipped, ...}``: ``fallback`` is
the decision's ordered chain after the chosen pool (each link with its trigger, ending with the queue), and
adds ``action`` (place | degrade | preempt | queue), ``gpus``, ``sku``, ``degrade``, ``victims`` and
``expected_start_s``. An exhausted pool is never an error: it is a skipped link with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, Engine, and_, bindparam, func, or_, select, update

from gpufleet.adapters.sql.models import PoolRow, PoolSignalRow, RegionRow, ReservationRow, SkuRow
from gpufleet.control.admission import (
    AdmissionOutcome,
    AdmissionPipeline,
    ChainPlacementRequest,
    PoolHeadroom,
    PricedOption,
    RunningWork,
)
from gpufleet.domain.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.domain.reservations import ReservationStatus
from gpufleet.service.auth import Actor, Role
from gpufleet.service.budgets import BudgetService, CapacityTaken
from gpufleet.service.clock import Clock
from gpufleet.service.placement_admissions import DEFAULT_RETENTION_S, AdmissionKey, AdmissionKeys, fingerprint
from gpufleet.service.placement_release import AdmissionReleases
from gpufleet.service.placement_victims import DEFAULT_HOLD_S, VictimPromises
from gpufleet.service.uow import UnitOfWork

__all__ = ["ChainPlacementRequest", "ChainPlacementService"]


DEFAULT_SIGNAL_MAX_AGE_S = 6 * 3600
ADMIT_ATTEMPTS = 5  # decisions an admission makes before it gives up on pools that keep filling up (409)
MAX_ALLOCATED_GPUS = 2**31 - 1  # a pool's allocated_gpus column (and what PATCH accepts): an admission stops there


class ChainPlacementService:
    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        budgets: BudgetService | None = None,
        *,
        signal_max_age_s: int = DEFAULT_SIGNAL_MAX_AGE_S,
        preemption_hold_s: int = DEFAULT_HOLD_S,
        admission_key_retention_s: int = DEFAULT_RETENTION_S,
    ) -> None:
        self._budgets = budgets
        self._victims = VictimPromises(preemption_hold_s)
        self._keys = AdmissionKeys(engine, admission_key_retention_s)
        self._releases = AdmissionReleases(engine, clock)
        self._signal_max_age_s = signal_max_age_s
        self._pipeline = AdmissionPipeline()
        # single-statement reads need no transaction: autocommit saves the BEGIN/ROLLBACK round trips
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._raw = engine
        self._clock = clock
        active = (
            select(ReservationRow.pool_id, func.sum(ReservationRow.units).label("units"))
            .where(
                ReservationRow.status == ReservationStatus.ACTIVE.value,
                ReservationRow.sku_id.in_(bindparam("skus", expanding=True)),
            )
            .group_by(ReservationRow.pool_id)
            .subquery()
        )
        base = (
            select(
                PoolRow.id,
                PoolRow.region_id,
                PoolRow.sku_id,
                PoolRow.tier,
                PoolRow.price_uusd_per_gpu_h,
                PoolRow.quota_gpus,
                PoolRow.allocated_gpus,
                active.c.units,
                PoolRow.provider_id,
                PoolRow.preemption_rate_per_h,
                PoolSignalRow.stockout,
                PoolSignalRow.queue_wait_s,
                PoolSignalRow.updated_at_s,
            )
            .outerjoin(active, active.c.pool_id == PoolRow.id)
            .outerjoin(PoolSignalRow, PoolSignalRow.pool_id == PoolRow.id)
            .where(PoolRow.sku_id.in_(bindparam("skus", expanding=True)))
        )
        self._all_regions = base
        self._some_regions = base.where(PoolRow.region_id.in_(bindparam("regions", expanding=True)))
        self._skus_exist = select(SkuRow.id).where(SkuRow.id.in_(bindparam("skus", expanding=True)))
        self._sku_memory = select(SkuRow.id, SkuRow.memory_gb).where(SkuRow.id.in_(bindparam("skus", expanding=True)))
        self._pools_exist = select(PoolRow.id, PoolRow.allocated_gpus).where(
            PoolRow.id.in_(bindparam("pools", expanding=True))
        )
        self._regions_exist = select(RegionRow.id).where(RegionRow.id.in_(bindparam("regions", expanding=True)))
        # an admission's claim: the GPUs fit in the pool's capacity as the read above counts it (reserved: its active
        # reservations + its quota; other tiers: the quota, none = unbounded)
        gpus = bindparam("gpus", type_=BigInteger)  # 64-bit: allocated_gpus + gpus never overflows on PostgreSQL
        reserved = (
            select(func.coalesce(func.sum(ReservationRow.units), 0))
            .where(
                ReservationRow.pool_id == PoolRow.id,
                ReservationRow.sku_id == PoolRow.sku_id,
                ReservationRow.status == ReservationStatus.ACTIVE.value,
            )
            .scalar_subquery()
        )
        capacity = func.coalesce(PoolRow.quota_gpus, 0) + reserved
        room = or_(
            and_(PoolRow.tier == Tier.RESERVED.value, PoolRow.allocated_gpus + gpus <= capacity),
            and_(
                PoolRow.tier != Tier.RESERVED.value,
                or_(PoolRow.quota_gpus.is_(None), PoolRow.allocated_gpus + gpus <= PoolRow.quota_gpus),
            ),
        )
        self._claim_stmt = (
            update(PoolRow)
            .where(PoolRow.id == bindparam("pool"), room, PoolRow.allocated_gpus + gpus <= MAX_ALLOCATED_GPUS)
            .values(allocated_gpus=PoolRow.allocated_gpus + gpus)
            .execution_options(synchronize_session=False)
        )

    def recommend(self, actor: Actor, req: ChainPlacementRequest, client_key: str | None = None) -> dict[str, Any]:
        """The decision for ``req``; with ``req.admit`` the admission, which takes its GPUs in the pool chosen
        (``allocated_gpus``) in a transaction that re-checks the pool's room under its row lock (PostgreSQL) or the
        write lock (SQLite): with the budget's booking when the team has a budget, else on its own. When a
        concurrent admission took the room first, the decision is made again on the pools as they are now.

        ``client_key`` (the Idempotency-Key header; admissions only, a recommendation books nothing): recorded with
        the booking (:mod:`placement_admissions`), so that the same key returns the first answer and books nothing
        again, and the same key with another request is a ConflictError; a key is kept for
        ``admission_key_retention_s`` (then pruned: a retry after it is a new admission)."""
        if req.gpus <= 0:
            raise ValidationError("gpus", "must be > 0")
        listed: set[tuple[str, str]] = set()
        for i, r in enumerate(req.running):  # listed twice, a job's GPUs would be freed twice
            if (r.pool_id, r.workload_id) in listed:
                raise ValidationError(
                    f"running[{i}].workload_id", f"{r.workload_id!r} is listed twice in {r.pool_id!r}"
                )
            listed.add((r.pool_id, r.workload_id))
        if req.admit:
            actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.APP_TEAM)  # a viewer books nothing
        else:
            return self._decide(actor, req, None)
        key = None if client_key is None else AdmissionKey(actor.user_id, client_key, fingerprint(req))
        self._victims.prune(self._raw, self._clock.now_s())  # the promises that ended: the table stays bounded
        if key is not None:
            self._keys.prune(self._clock.now_s())  # the keys past their retention: the table stays bounded
        for _ in range(ADMIT_ATTEMPTS):
            first = None if key is None else self._keys.replay(key)
            if first is not None:
                return first  # admitted (or queued) under this key already: its answer, nothing booked again
            claimed: list[tuple[str, int]] = []
            try:
                out = self._decide(actor, req, claimed, key)
            except CapacityTaken:
                continue  # the budget's transaction found the pool's room (or the key) gone: decide again
            if claimed:  # taken with the budget's booking, the key recorded with it and its answer
                return out
            queued = out["action"] == "queue" or out["pool"] is None
            if queued and key is None:
                return out  # nothing to take, nothing to record
            now_s = self._clock.now_s()
            with UnitOfWork(self._raw, write=True) as uow:  # no budget booked it: take the GPUs on their own
                took = None if queued else self._take(uow, actor, req, out["pool"], out["gpus"], out["victims"], now_s)
                if not queued and took is None:
                    continue  # the room or a victim went to a concurrent admission: roll back, decide again
                if key is not None and not self._keys.record(uow, key, now_s, out["pool"], out, took):
                    continue  # a concurrent request under the key recorded it first: roll back, replay its answer
                if not queued:
                    uow.audit(at_s=now_s, actor=actor.user_id, action="placement.admitted",
                              entity="pool", entity_id=out["pool"],
                              detail={"gpus": out["gpus"], "action": out["action"], "victims": out["victims"],
                                      "workload_id": req.workload_id, "idempotency_key": client_key})  # fmt: skip
                uow.commit()
                return out
        raise ConflictError(
            f"no pool chosen in {ADMIT_ATTEMPTS} decisions had room left for the admission (concurrent admissions "
            "took it, or the pool's allocated_gpus is at its limit); retry"
        )

    def release(self, actor: Actor, client_key: str) -> dict[str, Any]:
        """Release the caller's admission made under ``client_key``: its GPUs, victims and budget commitment free
        now (:mod:`placement_release`)."""
        return self._releases.release(actor, client_key)

    def _take(
        self,
        uow: UnitOfWork,
        actor: Actor,
        req: ChainPlacementRequest,
        pool_id: str,
        gpus: int,
        victims: Sequence[str],
        now_s: int,
    ) -> int | None:
        """Take an admission's GPUs in its pool: the GPUs its victims do not free (``allocated_gpus`` grows by them,
        re-checked under the pool's lock: a concurrent admission cannot take the free GPUs a preemption counted on),
        and promise its victims to it. Returns the GPUs taken in ``allocated_gpus``, None when the room or a victim
        is gone (nothing taken: the caller rolls back and decides again)."""
        chosen = [r for r in req.running if r.pool_id == pool_id and r.workload_id in set(victims)]
        need = gpus - sum(r.gpus for r in chosen)  # the victims' GPUs pass to the admission: no change in the count
        if need > 0 and not self._claim(uow, pool_id, need):
            return None
        if chosen and not self._victims.promise(uow, pool_id, chosen, actor.user_id, now_s):
            return None
        return max(0, need)

    def _claim(self, uow: UnitOfWork, pool_id: str, gpus: int) -> bool:
        """Take ``gpus`` in the pool (``allocated_gpus += gpus``) if its room still holds them: one conditional
        UPDATE, which on PostgreSQL waits for a concurrent claim's row lock and re-checks on the row it committed."""
        result = uow.session.execute(self._claim_stmt, {"pool": pool_id, "gpus": gpus})
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def _decide(
        self,
        actor: Actor,
        req: ChainPlacementRequest,
        claimed: list[tuple[str, int]] | None,
        key: AdmissionKey | None = None,
    ) -> dict[str, Any]:
        skus = sorted({req.sku_id} | {o.sku_id for o in req.degrade_options if o.sku_id is not None})
        params: dict[str, Any] = {"skus": skus}
        stmt = self._all_regions
        if req.regions:
            stmt = self._some_regions
            params["regions"] = list(req.regions)
        with self._engine.connect() as conn:  # a plain read: one round trip, no ORM session on the hot path
            rows = conn.execute(stmt, params).all()
            unseen_skus = sorted(set(skus) - {r[2] for r in rows})
            if unseen_skus:  # a SKU without pools here: a typo is an error (the request's, or a degrade option's)
                known_skus = set(conn.execute(self._skus_exist, {"skus": unseen_skus}).scalars())
                if req.sku_id not in known_skus and req.sku_id in unseen_skus:
                    raise ValidationError("sku", f"unknown SKU {req.sku_id!r}")
                for i, o in enumerate(req.degrade_options):
                    if o.sku_id is not None and o.sku_id in unseen_skus and o.sku_id not in known_skus:
                        raise ValidationError(f"degrade_options[{i}].sku", f"unknown SKU {o.sku_id!r}")
            allocated = {r[0]: int(r[6]) for r in rows}  # what each pool holds: running work listed must fit in it
            unseen_pools = sorted({r.pool_id for r in req.running} - allocated.keys())
            if unseen_pools:  # running work elsewhere (another region or SKU) is fine; in no pool at all, a typo
                allocated.update((p, int(n)) for p, n in conn.execute(self._pools_exist, {"pools": unseen_pools}))
                for i, r in enumerate(req.running):
                    if r.pool_id not in allocated:
                        raise ValidationError(f"running[{i}].pool", f"unknown pool {r.pool_id!r}")
            have = {row[1] for row in rows}
            unseen = [r for r in req.regions if r not in have]
            if unseen:  # a region without pools for these SKUs: a typo is an error, a real region just has none
                known = set(conn.execute(self._regions_exist, {"regions": unseen}).scalars())
                for i, region_id in enumerate(req.regions):
                    if region_id not in known and region_id in unseen:
                        raise ValidationError(f"regions[{i}]", f"unknown region {region_id!r}")
            held = self._victims.held(conn, req.running, self._clock.now_s())
            memory: dict[str, int] | None = None
            if req.replica_gpu_memory_gb is not None:  # what each SKU's GPU holds (the SKU registry's memory_gb)
                memory = {sku: int(gb) for sku, gb in conn.execute(self._sku_memory, {"skus": skus}).all()}
        _check_running(req.running, allocated, held)
        if held:  # running work promised to an earlier admission frees nothing for this one
            req = replace(req, running=tuple(r for r in req.running if (r.pool_id, r.workload_id) not in held))
        now_s = self._clock.now_s()
        states = []
        price_uusd: dict[str, int] = {}
        for (
            pool_id,
            region_id,
            sku_id,
            tier_name,
            price,
            quota,
            allocated,
            committed,
            provider_id,
            preempt,
            stockout,
            wait_s,
            signal_at_s,
        ) in rows:
            if signal_at_s is not None and self._stale(signal_at_s, now_s):
                stockout, wait_s = False, None  # an old report says nothing about now
            tier = Tier(tier_name)
            price_uusd[pool_id] = int(price)
            capacity: int | None = int(committed or 0) + (quota or 0) if tier is Tier.RESERVED else quota
            pool = CapacityPool(
                pool_id,
                provider_id,
                region_id,
                sku_id,
                tier,
                Decimal(price) / 1_000_000,
                preemption_rate_per_h=preempt,
            )
            free = math.inf if capacity is None else float(capacity - allocated)
            util = 0.0 if not capacity else min(1.0, allocated / capacity)
            states.append(PoolHeadroom(pool, free, util, stockout=bool(stockout), queue_wait_s=wait_s))
        team = req.team if req.team is not None else (actor.team_id if actor.role is Role.APP_TEAM else None)
        budgets = self._budgets
        gate = None
        claim = None
        if claimed is not None:

            def claim(uow: UnitOfWork, option: PricedOption) -> bool:
                """In the budget's batched transaction, which commits the other requests' bookings: a claim that
                fails part way (its room taken, a victim promised) takes nothing (rolled back to a savepoint)."""
                assert claimed is not None and option.pool_id is not None
                savepoint = uow.session.begin_nested()
                took = self._take(uow, actor, req, option.pool_id, option.gpus, option.victims, now_s)
                recorded = key is None or (
                    took is not None and self._keys.record(uow, key, now_s, option.pool_id, None, took)
                )
                if took is None or not recorded:
                    savepoint.rollback()  # the room, a victim or the key (a concurrent retry booked) went elsewhere
                    return False
                savepoint.commit()
                claimed.append((option.pool_id, took))
                return True

        booked = None
        if claimed is not None and key is not None:

            def booked(uow: UnitOfWork, outcome: AdmissionOutcome, commitment_id: int | None) -> None:
                """In the budget's transaction, before it commits: the answer of the booking the claim made (the
                pipeline's, given this outcome: the same decision as the one returned), recorded under the key."""
                assert key is not None

                def decided(*_: Any) -> AdmissionOutcome:
                    return outcome

                answer = self._pipeline.decide(req, states, now_s=now_s, team=team, price_uusd=price_uusd,
                                               budget=decided, sku_memory_gb=memory)  # fmt: skip
                self._keys.answered(uow, key, answer, commitment_id)

        if team is not None and budgets is not None:

            def gate(
                preferred: PricedOption, degrade: Sequence[PricedOption], context: dict[str, Any]
            ) -> AdmissionOutcome | None:
                assert team is not None and budgets is not None
                return budgets.admit_placement(actor, team, preferred=preferred, degrade=degrade,
                                               expected_run_s=req.expected_run_s, context=context,
                                               named=req.team is not None, book=req.admit, claim=claim,
                                               booked=booked)  # fmt: skip

        return self._pipeline.decide(
            req, states, now_s=now_s, team=team, price_uusd=price_uusd, budget=gate, sku_memory_gb=memory
        )

    def set_signal(self, actor: Actor, *, pool_id: str, stockout: bool, queue_wait_s: int | None) -> dict[str, Any]:
        """Record a pool's stockout signal and expected queue wait (replaces the previous one; audited)."""
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN)
        now_s = self._clock.now_s()
        with UnitOfWork(self._raw, write=True) as uow:
            # FOR KEY SHARE: the pool cannot be deleted (with its signal) before this signal is written
            if uow.session.scalar(uow.lock(select(PoolRow.id).where(PoolRow.id == pool_id), key_share=True)) is None:
                raise NotFoundError("pool", pool_id)
            values = {"stockout": stockout, "queue_wait_s": queue_wait_s, "updated_at_s": now_s}
            # one statement, so that concurrent first PUTs for a pool cannot all INSERT: the last one wins
            stmt = uow.insert(PoolSignalRow).values(pool_id=pool_id, **values)
            uow.session.execute(stmt.on_conflict_do_update(index_elements=["pool_id"], set_=values))
            uow.audit(
                at_s=now_s,
                actor=actor.user_id,
                action="pool.signal_set",
                entity="pool",
                entity_id=pool_id,
                detail={"stockout": stockout, "queue_wait_s": queue_wait_s},
            )
            uow.commit()
        return self._signal_out(pool_id, stockout, queue_wait_s, now_s, now_s)

    def signals(self, actor: Actor, *, limit: int, offset: int) -> list[dict[str, Any]]:
        """The pools' stored signals by pool id, each with ``expires_at_s`` (when placement stops counting it) and
        ``stale`` (it no longer counts)."""
        now_s = self._clock.now_s()
        stmt = (
            select(
                PoolSignalRow.pool_id, PoolSignalRow.stockout, PoolSignalRow.queue_wait_s, PoolSignalRow.updated_at_s
            )
            .order_by(PoolSignalRow.pool_id)
            .limit(limit)
            .offset(offset)
        )
        with self._engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [self._signal_out(p, bool(s), w, at, now_s) for p, s, w, at in rows]

    def _stale(self, updated_at_s: int, now_s: int) -> bool:
        return now_s >= updated_at_s + self._signal_max_age_s

    def _signal_out(
        self, pool_id: str, stockout: bool, queue_wait_s: int | None, updated_at_s: int, now_s: int
    ) -> dict[str, Any]:
        return {
            "pool": pool_id,
            "stockout": stockout,
            "queue_wait_s": queue_wait_s,
            "updated_at_s": updated_at_s,
            "expires_at_s": updated_at_s + self._signal_max_age_s,
            "stale": self._stale(updated_at_s, now_s),
        }


def _check_running(running: Sequence[RunningWork], allocated: dict[str, int], held: set[tuple[str, str]]) -> None:
    """The running work listed in each pool holds no more GPUs than the pool's ``allocated_gpus`` (the service's
    count of what runs there): made-up work would free GPUs the pool never held, and a preemption would be promised
    in a pool that cannot hold the request. Work promised to an earlier admission is left out: its GPUs are counted
    for that admission already. ValidationError naming the entry at which a pool's sum passes its count."""
    listed: dict[str, int] = {}
    for i, r in enumerate(running):
        if (r.pool_id, r.workload_id) in held:
            continue
        listed[r.pool_id] = listed.get(r.pool_id, 0) + r.gpus
        if listed[r.pool_id] > allocated[r.pool_id]:
            raise ValidationError(
                f"running[{i}].gpus",
                f"the running work listed in pool {r.pool_id!r} holds {listed[r.pool_id]} GPUs, more than the "
                f"{allocated[r.pool_id]} it has allocated (allocated_gpus; work promised to an earlier admission not "
                "counted): list only work that runs there",
            )
