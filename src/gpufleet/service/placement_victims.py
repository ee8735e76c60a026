"""Victims promised to admissions (``placement_victims``, migration 0017).

The service does not track running work: the caller lists it (``running``) and the placement picks victims among
it. An admitted placement that preempts (``admit: true``, action ``preempt``) records each victim as promised to it
for ``hold_s`` seconds (the setting ``placement_preemption_hold_s``): meanwhile every other placement answer (an
admission or a recommendation) leaves that running work out of its candidates, so one victim's GPUs are counted as
freed for at most one admission. A promise that expired (the preemption did not happen in time; the work still
runs) no longer counts, and the victim can be promised again; its row is deleted by a later admission (:meth:`prune`, at
most once every ``PRUNE_EVERY_S`` by each process), so the table holds about the promises of one hold.

Time releases a promise, or the caller that admitted it (:mod:`placement_release`: the admission's
``Idempotency-Key``, ``DELETE /v1/placement/admissions/{key}``); nothing else can: the request names no workload for
the admitted job, and a caller's ``running`` lists only the work it knows, so no later request proves that a
preemption happened (the victim is simply no longer listed: its promise then holds nothing back) or was abandoned (the
victim stays out of preemptions until the hold ends or the admission is released).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, Engine, bindparam, delete, select

from gpufleet.adapters.sql.models import PlacementVictimRow
from gpufleet.control.admission import RunningWork
from gpufleet.service.uow import UnitOfWork

DEFAULT_HOLD_S = 3600
PRUNE_EVERY_S = 3600  # a process deletes the promises that ended at most this often (of the service's clock)


class VictimPromises:
    def __init__(self, hold_s: int = DEFAULT_HOLD_S) -> None:
        self._hold_s = hold_s
        self._pruned_at_s: int | None = None
        self._held = select(PlacementVictimRow.pool_id, PlacementVictimRow.workload_id).where(
            PlacementVictimRow.pool_id.in_(bindparam("pools", expanding=True)),
            PlacementVictimRow.expires_at_s > bindparam("now"),
        )

    def held(self, conn: Connection, running: Sequence[RunningWork], now_s: int) -> set[tuple[str, str]]:
        """The (pool, workload) pairs of ``running`` promised to an admission now (nothing to read without any)."""
        if not running:
            return set()
        rows = conn.execute(self._held, {"pools": sorted({r.pool_id for r in running}), "now": now_s}).all()
        return {(pool, workload) for pool, workload in rows}

    def prune(self, engine: Engine, now_s: int) -> int:
        """Delete the promises that ended by ``now_s`` (at most once every ``PRUNE_EVERY_S`` by this process; else
        nothing); the number deleted. Its own short transaction. A concurrent promise that takes over an ended one
        (PostgreSQL) is re-checked by the delete and kept."""
        if self._pruned_at_s is not None and 0 <= now_s - self._pruned_at_s < PRUNE_EVERY_S:
            return 0
        with UnitOfWork(engine, write=True) as uow:
            result = uow.session.execute(
                delete(PlacementVictimRow)
                .where(PlacementVictimRow.expires_at_s <= now_s)
                .execution_options(synchronize_session=False)
            )
            gone = result.rowcount  # type: ignore[attr-defined]
            uow.commit()
        self._pruned_at_s = now_s
        return int(gone or 0)

    def promise(self, uow: UnitOfWork, pool_id: str, victims: Sequence[RunningWork], user: str, now_s: int) -> bool:
        """Promise ``victims`` (in ``pool_id``) to an admission by ``user`` in ``uow``'s transaction; False when one
        of them is promised to another admission still (the caller rolls back and decides again). One statement
        per victim in workload order: a concurrent promise of the same victim waits for this one's commit (its
        primary key) and then finds it held."""
        values = {"promised_at_s": now_s, "expires_at_s": now_s + self._hold_s, "admitted_by": user}
        for v in sorted(victims, key=lambda v: v.workload_id):
            stmt = uow.insert(PlacementVictimRow).values(
                pool_id=pool_id, workload_id=v.workload_id, gpus=v.gpus, **values
            )
            stmt = stmt.on_conflict_do_update(
                index_elements=["pool_id", "workload_id"],
                set_={**values, "gpus": v.gpus},
                where=PlacementVictimRow.expires_at_s <= now_s,  # only an expired promise is taken over
            )
            # RETURNING, not rowcount: one of the service's backends answered -1 for this upsert's rowcount
            if uow.session.execute(stmt.returning(PlacementVictimRow.workload_id)).first() is None:
                return False
        return True
