"""Review of the dashboard's memoized books (``FinOpsService.snapshot``) on SQLite and PostgreSQL: a read after
a write sees the write, even when the write lands while a snapshot is being built."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gpufleet.control.metering import MeterInputs
from gpufleet.service.clock import FixedClock, RandomIds
from gpufleet.service.finops import FinOpsService
from tests.integration.conftest import NOW_S, Database
from tests.integration.finops_server import WEEK_BUCKETS, Seeded, _records, seed


@pytest.fixture
def seeded(database: Database) -> Iterator[Seeded]:
    sd = seed(database)
    yield sd
    sd.server.stop()


class _WriteDuringBuild(FinOpsService):
    """A FinOps service whose next snapshot build has a write (through the served API, then ``invalidate`` as the
    API's middleware does) land after the build read the store and before it is memoized: a concurrent ingest."""

    write: Callable[[], None] | None = None

    def _load(self, t0_s: int, t1_s: int) -> MeterInputs:
        ld = super()._load(t0_s, t1_s)
        write, self.write = self.write, None
        if write is not None:
            write()
        return ld


def test_a_snapshot_built_across_a_write_is_not_kept(seeded: Seeded, database: Database) -> None:
    """Review (fixed), the defect: ``FinOpsService.snapshot`` memoized a snapshot whose build began before an
    ingest's ``invalidate`` (read the store, then the write and its invalidate, then the stale books stored), so
    the dashboard and the cost routes showed the books without the ingest for ``cache_s`` after it returned."""
    fin = _WriteDuringBuild(database.engine, FixedClock(NOW_S), RandomIds(), cache_s=3600)
    before = 7.5 * 168  # team-a 6 GPUs + team-b 1.5 GPUs over the week

    def ingest() -> None:
        with seeded.server.client("ml_platform_admin", "bob") as admin:
            r = admin.post("/v1/utilization:ingest", json={"records": _records(seeded.wl_b, "team-b", 2.0, 0.02)})
            assert r.status_code == 200 and r.json()["updated"] == WEEK_BUCKETS, r.text
        fin.invalidate()

    fin.write = ingest
    racing = fin.snapshot()  # read before the write landed: the old books are right for this one call
    assert sum(r.allocated_gpu_h for r in fin.meter.chargeback(racing.result, racing.allocations, "team").rows) == (
        pytest.approx(before)
    )
    after = fin.snapshot()  # asked after the write returned: it must see it
    rows = fin.meter.chargeback(after.result, after.allocations, "team").rows
    assert sum(r.allocated_gpu_h for r in rows) == pytest.approx(8 * 168)
