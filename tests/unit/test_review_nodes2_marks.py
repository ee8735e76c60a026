"""Review (nodes2): the marks a restarted controller's node release reads (``gpufleet.io/idle-since``,
``gpufleet.io/parked-at``; control/node_release.py :func:`marked_since`), against a user who writes them."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.control.node_release import OWN_CORDON_GRACE_S, PARKED_EXPIRED, NodeReleasePlanner, NodeUncordon
from gpufleet.control.observation import ObservedNode
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from tests.unit.test_node_release import H100, T0, Recorder, node, obs, pod


def marked(name: str, idle_s: float | None = None, parked_s: float | None = None) -> ObservedNode:
    n = node(name, cordoned=parked_s is not None)
    return replace(n, idle_s=idle_s, parked_s=parked_s, cordoned_by="consolidation" if parked_s is not None else "")


def test_a_restarted_planner_reads_the_idle_mark_and_writes_back_what_it_watches() -> None:
    """Review (fixed), the defect: the idle spells lived in the planner's memory only; a controller that restarts
    more often than the scaler's holds (a crash loop; the loop's on-demand hold is 51 minutes) never released an
    idle node. Its first round now reads the mark the last controller wrote (``idle_marks``, written on the node)."""
    planner = NodeReleasePlanner(Recorder(), BUILTIN_PRICE_CATALOG)
    got = planner.decide(obs(0, [marked("a", idle_s=T0 - 900), node("b")]))
    assert [(r.node, r.idle_for_s) for r in got.releases] == [("a", 900)]
    assert planner.idle_marks() == {"a": T0 - 900, "b": T0}
    assert planner.decide(obs(60, [marked("a", idle_s=T0 - 900), node("b")])).releases[0].idle_for_s == 960


def test_a_mark_is_held_between_the_nodes_creation_and_now_and_read_only_on_the_first_round() -> None:
    """Review (holds): a mark moved back counts no more than the node's age (``node`` was created an hour before
    T0), one moved ahead counts 0 (not offered); a node that appears later with a mark starts from when it is
    first seen, as before."""
    planner = NodeReleasePlanner(Recorder(), BUILTIN_PRICE_CATALOG)
    got = planner.decide(obs(0, [marked("old", idle_s=0.0), marked("ahead", idle_s=T0 + 86_400)]))
    assert [(r.node, r.idle_for_s) for r in got.releases] == [("old", 3600)]
    late = planner.decide(obs(60, [marked("ahead", idle_s=T0 + 86_400), marked("late", idle_s=0.0)]))
    assert late.releases == ()
    assert planner.idle_marks() == {"ahead": T0, "late": T0 + 60}


def test_a_mark_never_makes_a_busy_node_idle() -> None:
    """Review (holds): a busy node carrying an idle mark (written by hand, or left by a spell that ended while no
    controller ran) is no idle node: not offered, and left out of the marks (the controller removes its mark)."""
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    got = planner.decide(obs(0, [marked("busy", idle_s=0.0, parked_s=0.0)], [pod("w", 1, on="busy")]))
    assert got.releases == () and planner.idle_marks() == {}
    assert all(c.idle == [] for c in rec.asked)


def test_a_restarted_planner_counts_a_busy_parked_nodes_grace_from_its_parked_mark() -> None:
    """Review (fixed), the defect: a parked node a drain left with work (cut short by a crash) was uncordoned
    ``OWN_CORDON_GRACE_S`` after the controller first saw it: a controller that restarts within the grace kept it
    cordoned for good. The grace now runs from the cordon's own mark (``gpufleet.io/parked-at``)."""
    planner = NodeReleasePlanner(Recorder(), BUILTIN_PRICE_CATALOG)
    parked = marked("p", parked_s=T0 - OWN_CORDON_GRACE_S)
    got = planner.decide(obs(0, [parked], [pod("w", 1, on="p")]))
    assert got.uncordons == (NodeUncordon("p", H100, PARKED_EXPIRED),)
