"""Review (serve): a planning pass on a store that is slow but answers each statement just under the statement
timeout. ``STORE_FAILURES_PER_PASS`` bounds a pass by the store's failures; a store that never fails (each order
insert taking 100 s here on the pass's clock, each 29 s of a 30 s timeout in production) made the pass as long as the catalog: unbounded, the
leader loop waiting meanwhile (no approval submitted, no provider reconcile)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, select

from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import AuditEventRow
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import Services, build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.integration.conftest import NOW_S, Database
from tests.integration.test_review_reconcile_pass import _records

DAY = 86_400
SKUS = ("a100_80gb", "b200", "h100_80gb", "h200_141gb", "l40s")  # planned in this order (sorted)
DEADLINE_S = 250.0
INSERT_S = 100.0


class Monotonic:
    """The pass's monotonic clock (``Reconciler(monotonic=...)``), moved only by the slow inserts: the test does not
    depend on how fast this machine forecasts."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


@contextmanager
def _slow_inserts(s: Services, clock: Monotonic) -> Iterator[None]:
    """Every reservation insert answers after ``INSERT_S`` (under the statement timeout: it never fails)."""

    def slow(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO RESERVATIONS"):
            clock.now_s += INSERT_S

    event.listen(s.engine, "before_cursor_execute", slow)
    try:
        yield
    finally:
        event.remove(s.engine, "before_cursor_execute", slow)


def _recorded(s: Services) -> list[dict[str, Any]]:
    with s.engine.connect() as conn:
        rows = conn.scalars(select(AuditEventRow.detail_json).where(AuditEventRow.action == "reconciler.pass")
                            .order_by(AuditEventRow.id))  # fmt: skip
        return [json.loads(d) for d in rows]


def test_a_pass_stops_at_its_deadline_and_the_next_starts_with_what_it_deferred(database: Database) -> None:
    """Review (fixed), the defect: nothing bounded a pass whose steps all succeeded slowly (five SKUs, each order
    insert 0.4 s: the whole catalog planned whatever it took). Now the pass stops at ``plan_pass_deadline_s``
    (``stopped``: ``deadline``), names the rest as skipped and is recorded; it is retried after ``plan_retry_s``, and
    the retry plans first what the stopped pass deferred (else a catalog always longer than the deadline would never
    reach its last SKUs)."""
    engine = make_engine(database.url, busy_timeout_s=5.0, statement_timeout_s=5.0)
    clock = FixedClock(NOW_S)
    settings = Settings(db_url=database.url, reconcile_interval_s=30, plan_pass_deadline_s=DEADLINE_S,
                        plan_retry_s=600)  # fmt: skip
    s = build_services(settings, engine=engine, clock=clock)
    monotonic = Monotonic()
    s.reconciler._monotonic = monotonic  # what bootstrap wires: time.monotonic
    try:
        admin = Actor("bob", Role.ML_PLATFORM_ADMIN, None)
        for sku in SKUS:
            s.ingest.ingest(admin, _records(sku, NOW_S - 28 * DAY, 28, 24))
        with _slow_inserts(s, monotonic):
            first = s.reconciler.run_once()
        took_s = monotonic.now_s
        assert first.stopped and "deadline" in first.stopped and not first.lead_lost, first.as_dict()
        planned = [p["sku"] for p in first.proposals if "created" in p and "skipped" not in p and "error" not in p]
        skipped = [p["sku"] for p in first.proposals if "skipped" in p]
        assert planned and skipped and planned + skipped == list(SKUS), first.proposals
        assert all(p["created"] for p in first.proposals if p["sku"] in planned), first.proposals  # it did write
        assert DEADLINE_S <= took_s < DEADLINE_S + 3 * INSERT_S, took_s  # the deadline and the step under way
        assert [r.get("stopped") for r in _recorded(s)] == [first.stopped]  # recorded, deferred like a stopped pass
        assert not s.reconciler.due(DAY, NOW_S - DAY)
        clock.advance(600)
        assert s.reconciler.due(DAY, NOW_S - DAY)  # retried after plan_retry_s
        second = s.reconciler.run_once()  # not slow now: complete, the deferred SKUs first
        assert second.stopped is None, second.as_dict()
        assert [p["sku"] for p in second.proposals][: len(skipped)] == skipped, second.proposals
        assert sorted(p["sku"] for p in second.proposals) == list(SKUS)
    finally:
        s.leader.close()
        engine.dispose()
