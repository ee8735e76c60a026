"""Releasing an admission (``DELETE /v1/placement/admissions/{key}``): the caller that admitted a placement under an
``Idempotency-Key`` says it is over (the preemption was abandoned, or the job finished), and what it booked is freed
at once instead of by time:

- the GPUs it added to its pool's ``allocated_gpus`` (those its victims did not free) are taken off the count (never
  below 0: a report since may have replaced the count; the pool's next report replaces it anyway);
- its victims still promised to it are no longer promised (another admission may preempt them again);
- its budget commitment ends now (what it was expected to spend from now on is no longer committed).

A release is the caller's (the key is per caller: another caller's key of the same name is another admission, so
anyone else gets a 404), by the roles that may admit; it is audited (``placement.released``) and answered; a second
release answers the same and frees nothing again. The admission's key keeps answering the admission as it was
booked (a retry books nothing). An admission that queued booked nothing: its release frees nothing. A key pruned
(:mod:`placement_admissions`) is unknown: 404. An admission without a key cannot be released (nothing names it).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, delete, select, update

from gpufleet.adapters.sql.models import BudgetCommitmentRow, PlacementAdmissionRow, PlacementVictimRow, PoolRow
from gpufleet.domain.errors import NotFoundError
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import Clock
from gpufleet.service.uow import UnitOfWork


class AdmissionReleases:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    def release(self, actor: Actor, client_key: str) -> dict[str, Any]:
        """Release the caller's admission under ``client_key`` (see the module docstring); NotFoundError when the
        caller has no admission under it."""
        actor.require(Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN, Role.APP_TEAM)  # who may admit may release
        mine = (PlacementAdmissionRow.admitted_by == actor.user_id, PlacementAdmissionRow.client_key == client_key)
        now_s = self._clock.now_s()
        with UnitOfWork(self._engine, write=True) as uow:
            found = uow.session.execute(select(PlacementAdmissionRow.pool_id).where(*mine)).first()
            if found is None:  # (an admission under the key still being booked is not there yet either)
                raise NotFoundError("admission under Idempotency-Key", client_key)
            pool_id = found[0]
            # the pool's row first, then the key's: the order an admission's booking locks them in
            allocated = None
            if pool_id is not None:
                stmt = select(PoolRow.allocated_gpus).where(PoolRow.id == pool_id)
                allocated = uow.session.scalar(uow.lock(stmt))
            row = uow.session.execute(uow.lock(select(PlacementAdmissionRow).where(*mine))).scalar()
            if row is None:  # pruned meanwhile
                raise NotFoundError("admission under Idempotency-Key", client_key)
            if row.release_json is not None:  # released already: the same answer, nothing freed again
                out: dict[str, Any] = json.loads(row.release_json)
                return out
            returned = 0
            if allocated is not None and row.taken_gpus:
                returned = min(int(allocated), row.taken_gpus)
                uow.session.execute(
                    update(PoolRow)
                    .where(PoolRow.id == pool_id)
                    .values(allocated_gpus=PoolRow.allocated_gpus - returned)
                    .execution_options(synchronize_session=False)
                )
            victims = _victims(row.answer_json)
            released: list[str] = []
            if pool_id is not None and victims:
                promised = (  # this admission's promises: made by its caller when it was recorded
                    PlacementVictimRow.pool_id == pool_id,
                    PlacementVictimRow.workload_id.in_(victims),
                    PlacementVictimRow.admitted_by == actor.user_id,
                    PlacementVictimRow.promised_at_s == row.created_at_s,
                )
                live = select(PlacementVictimRow.workload_id).where(*promised, PlacementVictimRow.expires_at_s > now_s)
                released = sorted(uow.session.execute(live).scalars())
                uow.session.execute(
                    delete(PlacementVictimRow).where(*promised).execution_options(synchronize_session=False)
                )
            ended = False
            if row.commitment_id is not None:
                result = uow.session.execute(
                    update(BudgetCommitmentRow)
                    .where(BudgetCommitmentRow.id == row.commitment_id, BudgetCommitmentRow.end_s > now_s)
                    .values(end_s=now_s)
                    .execution_options(synchronize_session=False)
                )
                ended = result.rowcount == 1  # type: ignore[attr-defined]
            body = {
                "idempotency_key": client_key,
                "pool": pool_id,
                "admitted_at_s": row.created_at_s,
                "released_at_s": now_s,
                "gpus_returned": returned,
                "victims_released": released,
                "budget_commitment_ended": ended,
            }
            row.release_json = json.dumps(body, separators=(",", ":"))
            uow.audit(at_s=now_s, actor=actor.user_id, action="placement.released", entity="pool",
                      entity_id=pool_id or "-", detail=body)  # fmt: skip
            uow.commit()
        return body


def _victims(answer_json: str | None) -> list[str]:
    """The victims an admission's recorded answer names (none without an answer)."""
    if answer_json is None:
        return []
    return [str(v) for v in json.loads(answer_json).get("victims") or []]
