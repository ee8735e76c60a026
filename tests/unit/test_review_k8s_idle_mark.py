"""Review (k8s): an idle mark (``gpufleet.io/idle-since``) older than the node's last use, read by a planner that has not
watched the node (a controller started, or a new Lease term) (control/node_release.py)."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.control.node_release import NodeReleasePlanner
from gpufleet.control.observation import ObservedPod
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from tests.unit.test_node_release import T0, Recorder, node, obs, pod


def test_a_mark_older_than_a_pod_that_ran_on_the_node_since_is_not_trusted() -> None:
    """Review (fixed), the defect: a planner with no watch of its own (a controller started, or a new Lease term) took
    a node's idle spell from its ``gpufleet.io/idle-since`` mark alone. The mark is removed only by a controller that
    sees the node busy; when the last one lost the lead or crashed before it did, a job that ran there meanwhile left
    the old mark, and the node counted idle since before that job: released up to the job's length early. Now the
    mark counts no earlier than the start of the last pod observed on the node (finished pods too)."""
    # the last leader marked the node idle from T0 - 3000 and lost the lead (or crashed) before it saw a job run there
    # from T0 - 400 to T0 - 100: the mark stayed, the job's pod is still there, Succeeded
    marked = replace(node("gpu"), idle_s=T0 - 3000)
    done: ObservedPod = replace(pod("job", 1, on="gpu"), phase="Succeeded", started_s=T0 - 400)
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    planner.plan(obs(0, [marked], [done]))
    assert planner.idle_marks()["gpu"] >= T0 - 400
    assert [i.idle_for_s for i in rec.asked[0].idle] == []  # idle at most 400 s: not offered yet (min 600 s)
