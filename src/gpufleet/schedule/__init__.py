"""gpufleet.schedule."""

# The scheduler's public API (see docs/schedule.md). Decision code only: no I/O, clock and RNG passed in.
from gpufleet.schedule.consolidation import ConsolidationPlan, Move, RunningPod, plan_consolidation
from gpufleet.schedule.gang import GangInfeasible, GangPlacement, GangRequest, place_gang
from gpufleet.schedule.preemption import NoPreemption, PreemptionPlan, PreemptRequest, RunningJob, plan_preemption
from gpufleet.schedule.quota import Admission, QuotaBook, Reclaim, TeamQuota
from gpufleet.schedule.scheduler import POLICY_NAMES, Infeasible, Placement, Scheduler, make_policy
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest

__all__ = [
    "POLICY_NAMES",
    "Admission",
    "ConsolidationPlan",
    "GangInfeasible",
    "GangPlacement",
    "GangRequest",
    "Infeasible",
    "Move",
    "NoPreemption",
    "NodeSpec",
    "NodeTable",
    "Placement",
    "PodRequest",
    "PreemptRequest",
    "PreemptionPlan",
    "QuotaBook",
    "Reclaim",
    "RunningJob",
    "RunningPod",
    "Scheduler",
    "TeamQuota",
    "make_policy",
    "place_gang",
    "plan_consolidation",
    "plan_preemption",
]
