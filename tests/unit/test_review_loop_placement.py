"""Review (decision loop): the degrading placement chain never preempts in a full pool."""

from __future__ import annotations

from gpufleet.control.admission import ChainPlacementRequest, place
from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import Tier
from gpufleet.domain.workloads import Priority, Workload, WorkloadKind
from gpufleet.place.degrade import DegradeRequest, PoolHeadroom, RunningWork, recommend

POOLS = {p.tier: p for p in default_pools("h100_80gb")}
RESERVED = POOLS[Tier.RESERVED]


def _high_training() -> Workload:
    return Workload("job", "urgent", WorkloadKind.TRAINING, "t", "tn", Priority.HIGH, ("h100_80gb",), 8, gang_size=2)


def test_full_pool_still_preempts_strictly_lower_priority_work() -> None:
    """Review (fixed), the defect: ``place/degrade.py::_preempt`` asks ``_trigger(req, ps, 0)``, which skips a pool
    whose utilization is at or above ``utilization_high`` (0.95 by default). A pool with no free GPUs is, by
    construction, at 100% utilization, so preemption of strictly lower-priority work is never considered in exactly the
    pool that needs it: a HIGH job facing a reserved pool filled by a LOW job is queued instead of preempting (the same
    request with utilization reported as 0.9 preempts)."""
    running = (RunningWork("low-job", RESERVED.id, 16, Priority.LOW, WorkloadKind.TRAINING),)
    full = PoolHeadroom(RESERVED, 0.0, utilization=1.0)  # no free GPUs: the pool is 100% used
    d = recommend(DegradeRequest(_high_training(), 0, (full,), running=running))
    assert d.action == "preempt", (d.action, d.reason)
    assert d.victims == ("low-job",)


def test_service_admission_preempts_in_a_full_pool() -> None:
    """Review (fixed), the defect (same root cause, the service's path): the service derives utilization as allocated /
    capacity (``service/placement_chain.py``), so a full pool always reads 1.0 and ``control/admission.place`` answers
    ``queue`` for a HIGH request whose 16 GPUs a LOW job holds, never ``preempt_lower_priority``."""
    running = (RunningWork("low-job", RESERVED.id, 16, Priority.LOW, WorkloadKind.TRAINING),)
    req = ChainPlacementRequest(
        WorkloadKind.TRAINING, Priority.HIGH, "h100_80gb", 8, replicas=2, running=running, workload_id="job"
    )
    d = place(req, [PoolHeadroom(RESERVED, 0.0, utilization=1.0)], now_s=0)
    assert d["action"] == "preempt", (d["action"], d["reason"])
    assert d["victims"] == ["low-job"]
