"""Review (decision loop): consolidation drains on an observed cluster (``control/reclaim.py``)."""

from __future__ import annotations

from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.control.reclaim import plan_reclaim
from gpufleet.schedule.table import NodeSpec, PodRequest

SPOT_TAINT = "gpufleet.io/spot=true:NoSchedule"
SPOT_TOLERATION = ("gpufleet.io/spot", "Equal", "true", "NoSchedule")


def _node(name: str, taints: tuple[str, ...] = (), capacity_type: str = "on-demand") -> ObservedNode:
    return ObservedNode(NodeSpec(name, 64_000, 512 * 1024, 8, "H100", taints=taints), capacity_type=capacity_type)


def _pod(
    name: str,
    node: str,
    gpus: int,
    *,
    checkpointable: bool = False,
    gang: str = "",
    tolerations: tuple[tuple[str, str, str, str], ...] = (),
) -> ObservedPod:
    return ObservedPod(
        PodRequest(f"ns/{name}", 1000, 1024, gpus, 1000), "ns", name, f"u-{name}", "Running", node=node,
        kind="training", checkpointable=checkpointable, gang=gang, gang_min=2 if gang else 0, tolerations=tolerations,
    )  # fmt: skip


def test_drain_never_evicts_one_member_of_a_gang() -> None:
    """Review (fixed), the defect: ``plan_reclaim`` (control/reclaim.py:53-66) offers every active bound pod to the
    consolidation planner, gang members included, so it drains a node holding one worker of a running 2-member gang and
    evicts that worker alone. Stopping one worker stops the gang (``control/preempting.offerable`` excludes gang members
    for exactly that reason): gangs are all-or-nothing, a drain must not move a gang by one member."""
    obs = Observation(
        0.0,
        (_node("a"), _node("b"), _node("c")),
        (
            _pod("worker-0", "a", 1, checkpointable=True, gang="g"),
            _pod("worker-1", "b", 8, checkpointable=True, gang="g"),
            _pod("other", "c", 5),
        ),
    )
    plan = plan_reclaim(obs, 1000)
    evicted = {k for d in plan.drains for k in d.evict}
    assert not evicted & {"ns/worker-0", "ns/worker-1"}, plan.drains


def test_drain_counts_no_room_on_nodes_whose_taints_the_pod_does_not_tolerate() -> None:
    """Review (fixed), the defect: ``plan_reclaim`` builds its node table as ``NodeSpec(name, cpu, memory, gpus,
    model)`` (control/ reclaim.py:47), dropping the nodes' taints, so the planner believes an untolerating pod fits on a
    spot node. It drains the on-demand node of a non-checkpointed training pod whose only 'room elsewhere' is a spot
    node tainted ``gpufleet.io/spot=true:NoSchedule``: the evicted pod loses its work and can go nowhere (and the plan
    implies uncheckpointed work on spot)."""
    obs = Observation(
        0.0,
        (_node("od"), _node("spot", (SPOT_TAINT,), "spot")),
        (
            _pod("plain", "od", 1),
            _pod("ckpt", "spot", 5, checkpointable=True, tolerations=(SPOT_TOLERATION,)),
        ),
    )
    plan = plan_reclaim(obs, 1000)
    assert all(d.node != "od" for d in plan.drains), plan.drains
