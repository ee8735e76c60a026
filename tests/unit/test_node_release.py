"""The node release (control/node_release.py): the loop's node scaler asked on a Kubernetes observation. What it
offers the scaler (idle launched GPU nodes only, after the scaler's minimum idle time), what holds nodes (pending
work of the product, pods bound), Karpenter's launches counted as the product's need, and the scaler's own
rent-or-buy hold deciding when an idle node goes."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.node_rules import rent_or_buy_hold_s
from gpufleet.autoscale.nodes_payoff import PayoffAwareNodes
from gpufleet.control.loop import ControlLoop
from gpufleet.control.node_release import NodeReleasePlanner
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.ports import IdleNode, MoveContext, ScaleDownContext, ScaleUpContext
from gpufleet.schedule.table import NodeSpec, PodRequest

H100 = "NVIDIA-H100-80GB-HBM3"
T0 = 1_800_000_000.0


def node(name: str, capacity: str = "on-demand", *, cordoned: bool = False, product: str = H100) -> ObservedNode:
    spec = NodeSpec(name, 192_000, 2_000_000, 8, product)
    return ObservedNode(spec, sku=product, capacity_type=capacity, node_pool=capacity, unschedulable=cordoned,
                        created_s=T0 - 3600)  # fmt: skip


def pod(name: str, gpus: int, on: str = "", models: tuple[str, ...] = (), scheduler: str = "gpufleet") -> ObservedPod:
    req = PodRequest(f"ml/{name}", 1000, 1024, gpus, 1000, gpu_models=models)
    return ObservedPod(
        req, "ml", name, f"uid-{name}", "Running" if on else "Pending", node=on, scheduler_name=scheduler
    )


def obs(t: float, nodes: Sequence[ObservedNode], pods: Sequence[ObservedPod] = ()) -> Observation:
    return Observation(T0 + t, tuple(nodes), tuple(pods))


class Recorder:
    """A node scaler that records what it is asked and lets every offered node go (a hand-written fake)."""

    min_idle_s = 600

    def __init__(self) -> None:
        self.asked: list[ScaleDownContext] = []

    def nodes_to_launch(self, ctx: ScaleUpContext) -> int:
        return 0

    def scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]:
        self.asked.append(ctx)
        return [(n.node_id, "recorded") for n in ctx.idle]

    def moves(self, ctx: MoveContext) -> list[tuple[int, str]]:
        return []


def test_only_idle_launched_nodes_past_the_minimum_idle_time_are_offered() -> None:
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    fleet = [node("od-idle"), node("od-busy"), node("spot-idle", "spot"), node("res-idle", "reserved"),
             node("od-cordoned", cordoned=True), node("cpu", product="")]  # fmt: skip
    running = [pod("train", 4, on="od-busy")]
    assert planner.plan(obs(0, fleet, running)) == ()  # first seen idle now: idle for 0 s
    (ctx,) = rec.asked
    assert ctx.idle == [] and ctx.sku_id == H100 and ctx.fresh_nodes == 0
    assert ctx.capacity_gpus == 32 and ctx.free_gpus == 28 and ctx.demand_now_gpus == 4  # schedulable GPU nodes
    assert ctx.wait_price_usd_per_gpu_h == pytest.approx(6.88)  # the product's on-demand price
    got = planner.plan(obs(700, fleet, running))
    assert sorted(r.node for r in got) == ["od-idle", "spot-idle"]  # launched, idle 700 s >= 600 s
    assert all(r.reason == "recorded" and r.idle_for_s == 700 for r in got)
    offered = {i.pool_id: i for i in rec.asked[-1].idle}
    assert isinstance(offered["spot"], IdleNode) and offered["spot"].tier == "spot" and offered["on-demand"].gpus == 8
    assert offered["spot"].price_usd_per_gpu_h < offered["on-demand"].price_usd_per_gpu_h
    assert offered["on-demand"].up_for_s == 3600 + 700 and offered["on-demand"].node_start_s == 600


def test_a_pod_resets_the_idle_clock_and_pending_work_of_the_product_is_reported() -> None:
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    fleet = [node("a")]
    planner.plan(obs(0, fleet))
    planner.plan(obs(500, fleet, [pod("short", 1, on="a")]))  # busy for a while: the idle spell ends
    assert planner.plan(obs(900, fleet)) == ()  # idle again since 900 s
    assert rec.asked[-1].idle == []
    other = pod("l40s-job", 2, models=("NVIDIA-L40S",))
    mine = pod("h100-job", 8, models=(H100,))
    anywhere = pod("any-job", 1)
    default = pod("default-job", 2, scheduler="default-scheduler")
    nobody = pod("orphan", 4, scheduler="a-scheduler-nobody-runs")
    planner.plan(obs(1000, fleet, [other, mine, anywhere, default, nobody]))
    assert rec.asked[-1].pending_gpus == 11  # not the L40S pod, nor a pod no scheduler here places


def test_nodes_karpenter_launched_since_the_last_plan_are_the_products_fresh_need() -> None:
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    planner.plan(obs(0, [node("a")]))
    planner.plan(obs(60, [node("a"), node("b"), node("c", "spot"), node("r", "reserved")]))
    assert [c.fresh_nodes for c in rec.asked] == [0, 2]  # a reserved node is no launch
    planner.plan(obs(120, [node("a"), node("c", "spot")]))  # b went away: nothing new
    planner.plan(obs(180, [node("a"), node("b"), node("c", "spot")]))  # b is back: not fresh (seen before)
    assert [c.fresh_nodes for c in rec.asked] == [0, 2, 0, 0]


def test_the_loops_scaler_holds_an_idle_on_demand_node_for_its_rent_or_buy_break_even() -> None:
    """The loop's node scaler (ControlLoop.gpufleet's): an idle on-demand H100 node is held until the break-even of
    a relaunch (node start + 4 node starts of wait at on demand + the minimum billing), then released; a node of a
    product with pending work is never released."""
    scaler = ControlLoop.gpufleet(0).node_scaler
    assert isinstance(scaler, PayoffAwareNodes)
    planner = NodeReleasePlanner(scaler, BUILTIN_PRICE_CATALOG, node_start_s=600)
    buy_s = rent_or_buy_hold_s(600, 60, scaler.delay_weight, 1.0)
    fleet = [node("idle")]
    t = 0.0
    released = ()
    while not released and t < 4 * buy_s:
        released = planner.plan(obs(t, fleet))
        t += 60
    (r,) = released
    assert r.node == "idle" and buy_s <= r.idle_for_s < buy_s + 60
    assert scaler.held.get("rent_or_buy_hold", 0) > 0  # held on before, by the scaler's own rule
    busy = NodeReleasePlanner(ControlLoop.gpufleet(0).node_scaler, BUILTIN_PRICE_CATALOG)
    waiting = [pod("queued", 8)]
    assert all(busy.plan(obs(s, fleet, waiting)) == () for s in range(0, int(4 * buy_s), 300))


def _first_release_s(launch_every_s: float | None) -> float:
    """Watch one busy node for 4 hours (Karpenter launching a node every ``launch_every_s`` for other work, each
    busy while seen), then let a node go idle: how long the loop's scaler holds it."""
    planner = NodeReleasePlanner(ControlLoop.gpufleet(0).node_scaler, BUILTIN_PRICE_CATALOG)
    t, k = 0.0, 0
    while t < 4 * 3600:
        fleet = [node("n")]
        if launch_every_s is not None and t >= (k + 1) * launch_every_s:
            k += 1
        fleet += [node(f"fresh-{i}") for i in range(k)]
        planner.plan(obs(t, fleet, [pod(f"p-{m.name}", 8, on=m.name) for m in fleet]))
        t += 60
    start = t
    while t < start + 4 * 3600:
        fleet = [node("n")] + [node(f"fresh-{i}") for i in range(k)]
        if planner.plan(obs(t, fleet, [pod(f"p-{m.name}", 8, on=m.name) for m in fleet[1:]])):
            return t - start
        t += 60
    raise AssertionError("never released")


def test_karpenters_launches_keep_the_scalers_holds_where_nodes_are_needed() -> None:
    """The scaler caps its holds by the product's recent need for fresh nodes: with no launch for hours an idle node
    goes at the minimum idle time; where Karpenter launched nodes every half hour (reported as ``fresh_nodes``) the
    same node is held to its break-even."""
    assert _first_release_s(None) < 700
    assert _first_release_s(1800) >= 3000


@settings(max_examples=40, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["on-demand", "spot", "reserved", "cordoned"]), min_size=1, max_size=6),
    looks=st.lists(
        st.tuples(
            st.sampled_from([(), (), (), (0,), (1, 2)]),  # nodes (by index) with a running pod (mostly none)
            st.sampled_from([0, 0, 0, 1, 2]),  # pending pods of gpufleet's scheduler (mostly none)
            st.integers(300, 3600),  # seconds since the previous look
        ),
        min_size=1,
        max_size=20,
    ),
)
def test_the_loops_scaler_never_releases_a_busy_reserved_or_cordoned_node_nor_with_work_pending(
    kinds: list[str], looks: list[tuple[tuple[int, ...], int, int]]
) -> None:
    planner = NodeReleasePlanner(ControlLoop.gpufleet(0).node_scaler, BUILTIN_PRICE_CATALOG)
    fleet = [
        node(f"n{i}", "on-demand" if k == "cordoned" else k, cordoned=k == "cordoned") for i, k in enumerate(kinds)
    ]
    by_name = {n.name: n for n in fleet}
    t = 0.0
    for busy_at, pending, dt in looks:
        t += dt
        running = [pod(f"r{i}", 1, on=f"n{i}") for i in busy_at if i < len(kinds)]
        waiting = [pod(f"w{j}", 1) for j in range(pending)]
        released = planner.plan(obs(t, [n for n in fleet if n.name in by_name], running + waiting))
        for r in released:
            n = by_name.pop(r.node)  # a released node is gone from the next looks
            assert n.capacity_type in ("on-demand", "spot") and n.schedulable
            assert all(p.node != r.node for p in running)
            assert r.idle_for_s >= planner.scaler.min_idle_s
        if waiting:
            assert released == ()
