"""Review (sched): what a victim pod's annotations may do to the preemption planner on an observed cluster.

control/preempting.py reads ``gpufleet.io/restart-s``, ``gpufleet.io/min-runtime-s`` and
``gpufleet.io/last-checkpoint-s`` off the bound pods it offers as victims; its docstring promises that unreadable
values count as absent. Any pod's owner writes these, so a garbled or hostile value must neither stop the pass nor
make someone else's work look free to evict.
"""

from __future__ import annotations

import pytest

from gpufleet.control.binding import BindingPlanner
from tests.unit.test_control_preempting import NOW, _node, _obs, _plan_and_preempt, _pod


@pytest.mark.parametrize("key", ["gpufleet.io/restart-s", "gpufleet.io/min-runtime-s", "gpufleet.io/last-checkpoint-s"])
@pytest.mark.parametrize("value", ["inf", "-inf", "1e400"])
def test_an_infinite_annotation_on_a_victim_counts_as_absent(key: str, value: str) -> None:
    """Review (fixed), the defect: a bound low-priority pod annotated ``inf`` (or ``1e400``, a float overflow) made the whole preemption pass
    raise OverflowError: no pending pod of the cluster could preempt anything."""
    nodes = [_node("n0")]
    pods = [_pod("low", 8, node="n0", prio=1, ann=((key, value),)), _pod("high", 8, prio=100)]
    _, (decisions, none) = _plan_and_preempt(BindingPlanner(), _obs(nodes, pods))
    assert none == () and [v.pod for v in decisions[0].victims] == ["ns/low"]


def test_a_negative_restart_time_does_not_make_another_pods_eviction_look_cheap() -> None:
    """Review (fixed), the defect: the preemptor needs a whole node; n0 runs a 4-GPU pod annotated ``restart-s: -100000`` and a 4-GPU pod two
    hours into a run without checkpoints (8 GPU-hours to lose, more than the 1.3 the preemptor idles waiting for a
    node: the planner waits). The negative restart took 111 GPU-hours off the plan's cost and the two-hour run was
    evicted. A negative duration is no reading: counted as absent, the planner waits as it would without it."""
    nodes = [_node("n0")]
    pods = [
        _pod("cheat", 4, node="n0", prio=1, ann=(("gpufleet.io/restart-s", "-100000"),)),
        _pod("long", 4, node="n0", prio=1, ckpt=False, started=NOW - 7200),
        _pod("high", 8, prio=100),
    ]
    _, (decisions, none) = _plan_and_preempt(BindingPlanner(), _obs(nodes, pods))
    assert decisions == () and [(n.key, n.reason) for n in none] == [("ns/high", "waiting_is_cheaper")]
    honest = [_pod("cheat", 4, node="n0", prio=1), *pods[1:]]  # the same cluster without the annotation
    _, (decisions, none) = _plan_and_preempt(BindingPlanner(), _obs(nodes, honest))
    assert decisions == () and [(n.key, n.reason) for n in none] == [("ns/high", "waiting_is_cheaper")]
