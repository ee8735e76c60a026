"""Review (fixed), the defect: ``mark_idle`` decided from the controller's informer view whether a node's
``gpufleet.io/idle-since`` was written; a release round that came before the node's update event (the watch lags the
patch) wrote the same mark again, and the audit showed two ``mark_idle`` for one idle spell (seen as a flaky
``test_node_release`` on the real API server: the trail ``mark_idle, mark_idle, cordon, delete_node``). The
controller now remembers the values it wrote and does not write one again while its view has not caught up."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.reclaim import mark_idle
from gpufleet.control.observation import ObservedNode
from tests.unit.test_node_release import T0, node, obs


def node_with_mark(name: str, since_s: float) -> ObservedNode:
    return replace(node(name), idle_s=since_s)


class PatchKube:
    """Records the patches; the view the controller reads is the test's (it never catches up here)."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, Any]] = []

    def patch(self, path: str, body: Any, content_type: str) -> Any:
        self.patches.append((path, body))
        return body


def test_a_mark_written_is_not_written_again_before_the_view_shows_it() -> None:
    kube = PatchKube()
    act = Actuator(kube, sleep=lambda s: None)  # type: ignore[arg-type]
    stale = obs(0, [node("n1")])  # idle_s None: the view has not seen the mark yet
    written: dict[str, int | None] = {}
    for _ in range(3):
        mark_idle(act, stale, {"n1": int(T0)}, (), written)
    assert [p for p, _ in kube.patches] == ["/api/v1/nodes/n1"]
    assert [a["action"] for a in act.audit] == ["mark_idle"]
    # the spell ends: the removal is written once too, then a new spell's mark once
    seen = obs(60, [node("n1")])
    seen_marked = obs(60, [node_with_mark("n1", T0)])
    mark_idle(act, seen_marked, {}, (), written)
    mark_idle(act, seen_marked, {}, (), written)
    mark_idle(act, seen, {"n1": int(T0) + 600}, (), written)
    assert [a["action"] for a in act.audit] == ["mark_idle", "unmark_idle", "mark_idle"]


def test_a_node_gone_is_forgotten() -> None:
    act = Actuator(PatchKube(), sleep=lambda s: None)  # type: ignore[arg-type]
    written: dict[str, int | None] = {}
    mark_idle(act, obs(0, [node("n1")]), {"n1": int(T0)}, (), written)
    assert written == {"n1": int(T0)}
    mark_idle(act, obs(60, []), {}, (), written)
    assert written == {}
