"""Gang preemption on an observed cluster (control/preempting.py::plan_gang through BindingPlanner.preempt): every
member of a gang takes a node emptied of its victims, so the rule "only strictly lower ``spec.priority`` is a
victim" (docs/kubernetes.md, "Priority preemption") must hold for each member, not for the gang's highest one."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.control.binding import BindingPlanner
from gpufleet.control.observation import ObservedPod
from tests.unit.test_control_preempting import NOW, _node, _obs, _plan_and_preempt, _pod


def _gang(prios: tuple[int, ...]) -> list[ObservedPod]:
    return [_pod(f"w{i}", 8, prio=p, gang="g", gmin=len(prios)) for i, p in enumerate(prios)]


def test_a_gang_member_never_displaces_work_of_its_own_priority_or_higher() -> None:
    """Review (fixed), the defect: plan_gang asked the planner with the highest member's priority, so a gang whose
    members were 100 and 1 evicted priority-50 pods for the priority-1 member too."""
    nodes = [_node("n0"), _node("n1")]
    mid = [_pod("mid-a", 8, node="n0", prio=50), _pod("mid-b", 8, node="n1", prio=50)]
    pl = BindingPlanner()
    _, (decisions, none) = _plan_and_preempt(pl, _obs(nodes, [*mid, *_gang((100, 1))]))
    assert decisions == ()
    assert [(n.key, n.reason) for n in none] == [("ns/g", "no_eligible_victims")]
    # the same gang with every member above the victims still preempts (the rule is per member, not "never")
    pl = BindingPlanner()
    _, (decisions, none) = _plan_and_preempt(pl, _obs(nodes, [*mid, *_gang((100, 51))]))
    assert none == () and [d.key for d in decisions] == ["ns/g"]
    assert sorted(v.pod for v in decisions[0].victims) == ["ns/mid-a", "ns/mid-b"]
    assert decisions[0].priority == 51  # the gang's priority: the one every member reaches


def test_a_gang_with_a_member_that_may_not_preempt_waits_whichever_member_is_listed_first() -> None:
    """Review (fixed), the defect: only the first listed member's preemptionPolicy was read, so a gang preempted
    or not depending on which of its members sorted first by name."""
    nodes = [_node("n0"), _node("n1")]
    low = [_pod("low-a", 8, node="n0", prio=1), _pod("low-b", 8, node="n1", prio=1)]
    for never in (0, 1):
        gang = _gang((100, 100))
        gang[never] = replace(gang[never], preempts=False)
        _, (decisions, none) = _plan_and_preempt(BindingPlanner(), _obs(nodes, [*low, *gang], now=NOW))
        assert decisions == () and [(n.key, n.reason) for n in none] == [("ns/g", "preemption_policy_never")]
