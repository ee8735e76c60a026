"""Review: the FinOps books memoized per window (``service/finops.py`` ``FinOpsService.snapshot``), as any token
holder drives it through ``GET /v1/workloads/{id}/cost?window=...`` (an app team reads its own workload's cost)."""

from __future__ import annotations

from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import RandomIds
from gpufleet.service.finops import FinOpsService
from gpufleet.service.workloads import WorkloadSpec
from tests.integration.conftest import NOW_S, Database
from tests.integration.review_books_helpers import ADMIN, H, rec, services, team


def test_asking_many_windows_does_not_keep_a_snapshot_of_the_fleet_for_each(database: Database) -> None:
    """Review (fixed), the defect: ``snapshot`` keeps the fleet's whole books for every window it was asked
    (``self._cache[window_s] = ...``) and drops them only on a write (``invalidate``); an expired entry is never
    evicted. The window is the caller's (``?window=1h`` .. ``8784h``: 8,784 distinct windows), so one app-team token
    looping over windows pins thousands of full fleet snapshots in the API process's memory until someone writes."""
    svc, clock, _ = services(database, NOW_S)
    finops = FinOpsService(database.engine, clock, RandomIds(), cache_s=3600)  # memoizing, as served (5 s)
    team(svc, "t1")
    wid = svc.workloads.create(ADMIN, WorkloadSpec("job", "img", 8, 64, 1, "h100_80gb", 1, 1, "rps", None, "t1", None,
                                                   "normal", "training"))  # fmt: skip
    svc.ingest.ingest(ADMIN, [rec("dcgm", NOW_S - (h + 1) * H, H, wid, "t1", 1.0) for h in range(48)])
    ann = Actor("ann", Role.APP_TEAM, "t1")
    for hours in range(1, 101):
        svc.usage.workload_cost(ann, wid, window_s=hours * H)  # the route: access check, then the books
        finops.workload_view(wid, hours * H)
    assert len(finops._cache) <= 16, f"{len(finops._cache)} fleet snapshots held"
    assert finops.snapshot(100 * H) is finops.snapshot(100 * H)  # still memoized: the newest window is kept
