"""Review (drain): nodes gpufleet cordoned itself (a consolidation's drain, a release cut short) in the node
release's planner (control/node_release.py ``NodeReleasePlanner.decide``): released or uncordoned, never kept
cordoned for good; an administrator's cordon never touched."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.control.node_release import (
    HELD_PARKED,
    OWN_CORDON_GRACE_S,
    PARKED_EXPIRED,
    NodeRelease,
    NodeReleasePlanner,
    NodeUncordon,
)
from gpufleet.control.observation import ObservedNode, ObservedPod
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.ports import ScaleDownContext
from tests.unit.test_node_release import H100, Recorder, node, obs, pod


def parked(name: str, capacity: str = "on-demand") -> ObservedNode:
    return replace(node(name, capacity, cordoned=True), cordoned_by="consolidation")


class Holder(Recorder):
    """A node scaler that keeps every node offered (a rent-or-buy hold)."""

    def scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]:
        self.asked.append(ctx)
        return []


def test_the_mark_counts_only_on_a_cordoned_node() -> None:
    assert parked("a").own_cordon
    assert not replace(node("a"), cordoned_by="x").own_cordon  # an uncordoned node with a stale mark: not parked
    assert not node("a", cordoned=True).own_cordon  # an administrator's cordon


def test_an_empty_parked_node_is_released_after_the_minimum_idle_time_without_a_new_cordon() -> None:
    """Review (fixed), the defect: a node the consolidation drained stayed cordoned for good: the release offered
    only uncordoned nodes. Now it is an idle node of its product, offered after the scaler's minimum idle time
    (600 s: the evicted pods find their places first), and released as already cordoned (``parked``)."""
    planner = NodeReleasePlanner(Recorder(), BUILTIN_PRICE_CATALOG)
    ds = replace(pod("plugin", 0, on="p"), owner_kind="DaemonSet")  # goes with the node: no work
    assert planner.decide(obs(0, [parked("p")], [ds])).releases == ()
    assert planner.decide(obs(540, [parked("p")], [ds])).releases == ()
    got = planner.decide(obs(600, [parked("p")], [ds]))
    assert got.releases == (NodeRelease("p", H100, "recorded", 600, parked=True),) and got.uncordons == ()


def test_an_empty_parked_node_the_scaler_keeps_is_uncordoned() -> None:
    """A kept node must be able to take work: the scaler's hold uncordons a parked node (once offered)."""
    planner = NodeReleasePlanner(Holder(), BUILTIN_PRICE_CATALOG)
    assert planner.decide(obs(0, [parked("p"), node("u")])).uncordons == ()
    got = planner.decide(obs(600, [parked("p"), node("u")]))
    assert got.releases == () and got.uncordons == (NodeUncordon("p", H100, HELD_PARKED),)


def test_a_parked_node_with_work_is_uncordoned_after_the_grace_and_a_draining_one_is_left_alone() -> None:
    planner = NodeReleasePlanner(Recorder(), BUILTIN_PRICE_CATALOG)
    cpu = replace(parked("cpu"), sku="", spec=replace(parked("cpu").spec, gpu_count=0, gpu_model=""))
    fleet = [parked("busy"), parked("draining"), parked("res", "reserved"), node("admin", cordoned=True), cpu]
    work = [pod("a", 1, on="busy"), pod("b", 1, on="draining"), pod("c", 1, on="admin")]
    for t in range(0, OWN_CORDON_GRACE_S, 60):
        got = planner.decide(obs(t, fleet, work), draining={"draining"})
        assert got.releases == () and got.uncordons == ()
    got = planner.decide(obs(OWN_CORDON_GRACE_S, fleet, work), draining={"draining"})
    assert got.releases == ()
    assert got.uncordons == (
        NodeUncordon("busy", H100, PARKED_EXPIRED),
        NodeUncordon("cpu", "", PARKED_EXPIRED),
        NodeUncordon("res", H100, PARKED_EXPIRED),
    )
    # the drain ends and leaves its node parked with work still on it (a pod it could not evict): its grace starts
    got = planner.decide(obs(OWN_CORDON_GRACE_S + 60, fleet, work))
    assert "draining" not in {u.node for u in got.uncordons}
    got = planner.decide(obs(2 * OWN_CORDON_GRACE_S + 60, fleet, work))
    assert "draining" in {u.node for u in got.uncordons}


def test_an_administrators_cordon_is_never_released_nor_undone() -> None:
    planner = NodeReleasePlanner(Recorder(), BUILTIN_PRICE_CATALOG)
    fleet = [node("admin-idle", cordoned=True), node("admin-busy", cordoned=True)]
    work = [pod("a", 1, on="admin-busy")]
    for t in range(0, 10 * OWN_CORDON_GRACE_S, 300):
        got = planner.decide(obs(t, fleet, work))
        assert got.releases == () and got.uncordons == ()


def test_a_pending_pod_of_the_product_uncordons_an_offered_parked_node() -> None:
    """Pending work holds every idle node (the scaler's rule); a held parked node is of no use to it cordoned."""

    class Real(Recorder):
        def scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]:
            return [] if ctx.pending_gpus else [(n.node_id, "recorded") for n in ctx.idle]

    planner = NodeReleasePlanner(Real(), BUILTIN_PRICE_CATALOG)
    waiting: list[ObservedPod] = [pod("w", 8)]
    planner.decide(obs(0, [parked("p")], waiting))
    got = planner.decide(obs(600, [parked("p")], waiting))
    assert got.uncordons == (NodeUncordon("p", H100, HELD_PARKED),)
