"""Idempotency keys of admissions (``placement_admissions``, migration 0018).

An admission (``admit: true``) books: GPUs in its pool (``allocated_gpus``), the team's budget, its victims. A client
that timed out and sends it again must not book twice, so an admission may carry an ``Idempotency-Key`` (per caller,
as reservations'): the key is recorded in the transaction that books (its row's primary key is what concurrent
requests under one key race on: exactly one booking commits with it, the others roll back and read it), bound to a
fingerprint of the request, with the answer. A later request under the key returns that answer and books nothing; one
with another request is a ConflictError naming the key. An admission that queued booked nothing but records its
answer too: the same key always answers the same.

The answer is written in the transaction that books, also for a booking made in the budget's batched transaction
(recorded there without it, then given its answer once the budget's outcome is known, before the commit): a process
that dies after the commit has recorded what it booked, and a retry (on any process) answers it.

The row also keeps what releasing the admission gives back (migration 0020, :mod:`placement_release`): the GPUs it
added to its pool's ``allocated_gpus`` and the id of its budget commitment.

A key is kept for ``retention_s`` (the setting ``placement_admission_key_retention_s``, 24 h by default) after the
admission that recorded it, and, unreleased, as long as its budget commitment runs (so a long run can still be
released when it ends early): a retry within it answers the same. Past it the row is pruned (:meth:`AdmissionKeys.prune`,
run before a keyed admission, at most once every ``PRUNE_EVERY_S`` by each process), so the table holds about the
keys of one retention, not every key ever sent; a retry after its key was pruned is a new admission.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, exists, or_, select, update

from gpufleet.adapters.sql.models import BudgetCommitmentRow, PlacementAdmissionRow
from gpufleet.control.admission import ChainPlacementRequest
from gpufleet.domain.errors import ConflictError
from gpufleet.service.uow import UnitOfWork

DEFAULT_RETENTION_S = 86_400  # how long an admission's key answers the same (placement_admission_key_retention_s)
PRUNE_EVERY_S = 3600  # a process prunes the keys past their retention at most this often (of the service's clock)


@dataclass(frozen=True, slots=True)
class AdmissionKey:
    """An admission's key: the caller, the Idempotency-Key and the fingerprint of its request."""

    user: str
    key: str
    fingerprint: str


def fingerprint(req: ChainPlacementRequest) -> str:
    """What an admission's key is bound to: the whole request, normalized (enums by value)."""

    def plain(o: Any) -> Any:
        if isinstance(o, enum.Enum):
            return o.value
        raise TypeError(type(o).__name__)

    body = json.dumps(dataclasses.asdict(req), sort_keys=True, separators=(",", ":"), default=plain)
    return hashlib.sha256(body.encode()).hexdigest()


def _encode(answer: dict[str, Any]) -> str:
    return json.dumps(answer, separators=(",", ":"), default=str)  # Decimals as strings: read back exactly


class AdmissionKeys:
    def __init__(self, engine: Engine, retention_s: int = DEFAULT_RETENTION_S) -> None:
        self._engine = engine
        self._retention_s = retention_s
        self._pruned_at_s: int | None = None
        self._find = select(
            PlacementAdmissionRow.fingerprint, PlacementAdmissionRow.pool_id, PlacementAdmissionRow.answer_json
        )

    def prune(self, now_s: int) -> int:
        """Delete the keys recorded more than the retention before ``now_s``, but those of an unreleased admission
        whose budget commitment still runs (at most once every ``PRUNE_EVERY_S`` by this process; else nothing); the
        number deleted. Its own short transaction, not the booking's."""
        if self._pruned_at_s is not None and 0 <= now_s - self._pruned_at_s < PRUNE_EVERY_S:
            return 0
        with UnitOfWork(self._engine, write=True) as uow:
            row = PlacementAdmissionRow
            running = exists().where(BudgetCommitmentRow.id == row.commitment_id, BudgetCommitmentRow.end_s > now_s)
            result = uow.session.execute(
                delete(row)
                .where(row.created_at_s < now_s - self._retention_s, or_(row.release_json.is_not(None), ~running))
                .execution_options(synchronize_session=False)
            )
            gone = result.rowcount  # type: ignore[attr-defined]
            uow.commit()
        self._pruned_at_s = now_s
        return int(gone or 0)

    def replay(self, key: AdmissionKey) -> dict[str, Any] | None:
        """The answer recorded under ``key`` (None: none yet); ConflictError when the key was used for another
        request, or when its row has no answer (a booking recorded by a version that wrote the answer after its
        commit, and died in between)."""
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.execute(
                self._find.where(
                    PlacementAdmissionRow.admitted_by == key.user, PlacementAdmissionRow.client_key == key.key
                )
            ).first()
        if row is None:
            return None
        bound, pool_id, answer = row
        if bound != key.fingerprint:
            raise ConflictError(
                f"Idempotency-Key {key.key!r} was already used for another admission request; use a new key for "
                "a new admission"
            )
        if answer is None:
            raise ConflictError(
                f"the admission under Idempotency-Key {key.key!r} was booked in pool {pool_id!r} but its answer "
                "was not recorded; nothing is booked again under this key (use a new key for a new admission)"
            )
        out: dict[str, Any] = json.loads(answer)
        return out

    def record(
        self,
        uow: UnitOfWork,
        key: AdmissionKey,
        now_s: int,
        pool_id: str | None,
        answer: dict[str, Any] | None,
        taken_gpus: int | None = None,
    ) -> bool:
        """Record ``key`` in ``uow``'s transaction (the one that books, if anything is booked); False when a
        concurrent request under the key recorded it first (on PostgreSQL this waits for that transaction: the
        caller rolls back and replays the answer it committed). ``answer`` None: written later in the same transaction
        (:meth:`answered`). ``taken_gpus``: the GPUs the booking added to the pool's ``allocated_gpus``."""
        stmt = uow.insert(PlacementAdmissionRow).values(
            admitted_by=key.user,
            client_key=key.key,
            fingerprint=key.fingerprint,
            pool_id=pool_id,
            created_at_s=now_s,
            answer_json=None if answer is None else _encode(answer),
            taken_gpus=taken_gpus,
        )
        stmt = stmt.on_conflict_do_nothing(index_elements=["admitted_by", "client_key"])
        return uow.session.execute(stmt.returning(PlacementAdmissionRow.client_key)).first() is not None

    def answered(
        self, uow: UnitOfWork, key: AdmissionKey, answer: dict[str, Any], commitment_id: int | None = None
    ) -> None:
        """Write, in ``uow``'s transaction (the one that recorded ``key`` without an answer), the booking's answer and
        its budget commitment's id."""
        uow.session.execute(
            update(PlacementAdmissionRow)
            .where(PlacementAdmissionRow.admitted_by == key.user, PlacementAdmissionRow.client_key == key.key)
            .values(answer_json=_encode(answer), commitment_id=commitment_id)
            .execution_options(synchronize_session=False)
        )
