"""What the recorded planning passes (audit events ``reconciler.pass``, :mod:`gpufleet.service.reconciler`) say
about the next one: the newest pass, how many passes in a row were partial (the retry's backoff), what the newest one
skipped (planned first by the next), how many steps it deferred (``/metrics``). Passes recorded after the reader's
now (by a process whose clock ran ahead) are not counted."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.models import AuditEventRow

# recorded passes read (newest first) to count the stopped ones in a row: past 2**15 retry intervals any period is
# reached (the retry never waits past the period)
RETRY_STREAK_READ = 16
_STAGES = ("forecasts", "proposals", "placements")


def _recorded(now_s: int) -> tuple[Any, ...]:
    return (AuditEventRow.action == "reconciler.pass", AuditEventRow.at_s <= now_s)


_NEWEST = (AuditEventRow.at_s.desc(), AuditEventRow.id.desc())


def newest_pass(session: Session, now_s: int) -> tuple[int, int] | None:
    """(id, at_s) of the newest recorded pass; None if none (one index read: ``audit_events (action, at_s)``)."""
    row = session.execute(
        select(AuditEventRow.id, AuditEventRow.at_s).where(*_recorded(now_s)).order_by(*_NEWEST).limit(1)
    ).first()
    return None if row is None else (int(row[0]), int(row[1]))


def partial(detail_json: str) -> bool:
    """Whether a recorded pass (its audit event's detail) left work to retry soon: it stopped before its end
    (``stopped``: the store blocked or slow, its deadline; the rest deferred) or some of its steps failed on the
    store's availability (``store_failures``: rows other sessions held past the statement timeout). A pass whose
    steps failed otherwise (a refused proposal) is complete: retrying it soon would fail the same way. An unreadable
    detail counts as complete."""
    detail = _detail(detail_json)
    return bool(detail.get("stopped") or detail.get("store_failures"))


def partial_in_a_row(session: Session, now_s: int) -> int:
    """How many of the newest recorded passes in a row were partial (:func:`partial`; 0: the newest was
    complete), counted over the newest ``RETRY_STREAK_READ``."""
    details = session.scalars(
        select(AuditEventRow.detail_json).where(*_recorded(now_s)).order_by(*_NEWEST).limit(RETRY_STREAK_READ)
    ).all()
    n = 0
    for d in details:
        if not partial(d):
            break
        n += 1
    return n


def skipped_by_last_pass(session: Session, now_s: int) -> set[str]:
    """The SKUs and clusters the newest recorded pass named as skipped."""
    got = session.scalar(select(AuditEventRow.detail_json).where(*_recorded(now_s)).order_by(*_NEWEST).limit(1))
    detail = _detail(got or "{}")
    return {str(e.get("sku", e.get("cluster"))) for e in _skipped(detail)}


def deferred_steps(detail: dict[str, Any]) -> int:
    """How many steps a recorded pass (its audit event's detail) skipped, put off to the next pass: SKUs not
    forecast, SKU-regions not planned, clusters not re-evaluated because the store was blocked or slow."""
    return len(_skipped(detail))


def _skipped(detail: dict[str, Any]) -> list[dict[str, Any]]:
    stages = (detail.get(k) for k in _STAGES)
    return [e for entries in stages if isinstance(entries, list) for e in entries
            if isinstance(e, dict) and "skipped" in e]  # fmt: skip


def _detail(detail_json: str) -> dict[str, Any]:
    try:
        detail = json.loads(detail_json)
    except ValueError:
        return {}
    return detail if isinstance(detail, dict) else {}
