"""The node release (control/node_release.py): the loop's node scaler asked on a Kubernetes observation. What it
offers the scaler (idle launched GPU nodes only, after the scaler's minimum idle time), what holds nodes (pending
work of the product, pods bound), Karpenter's launches counted as the product's need, and the scaler's own
rent-or-buy hold deciding when an idle node goes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.node_rules import rent_or_buy_hold_s
from gpufleet.autoscale.nodes_payoff import LOOP_DELAY_WEIGHT, PayoffAwareNodes
from gpufleet.control.buffer_reading import late_starts
from gpufleet.control.gang_reach import ProductReach, admits, launch_room_gpus, unreachable_gangs
from gpufleet.control.loop import ControlLoop
from gpufleet.control.node_release import NodeReleasePlanner
from gpufleet.control.observation import Observation, ObservedNode, ObservedNodePool, ObservedPod, rfc3339_s
from gpufleet.control.start_buffer import StartBuffer
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


def member(gang: str, i: int, gpus: int = 8, gang_min: int = 0, on: str = "") -> ObservedPod:
    p = pod(f"{gang}-{i}", gpus, on=on)
    return replace(p, gang=gang, gang_min=gang_min)


def limit(name: str, gpus: int | None, product: str = H100) -> ObservedNodePool:
    return ObservedNodePool(name, gpus, products=(product,), capacity_types=(name,), gpu=True)


def reach(free: Sequence[int], launch: int | None, per: int = 8) -> Callable[[object], dict[str, ProductReach]]:
    """The same reach for every gang, whatever its pods tolerate."""
    return lambda _members: {H100: ProductReach(per, tuple(free), launch)}


def test_a_gang_is_out_of_reach_when_free_starting_and_launchable_nodes_are_fewer_than_it_needs() -> None:
    gang = [member("g", i, gang_min=4) for i in range(4)]
    key = ("ml", "g")
    assert unreachable_gangs(gang, [], reach([8, 8], 8)) == {key}  # 2 free nodes + 1 launchable < 4
    assert unreachable_gangs(gang, [], reach([8, 8], 16)) == frozenset()  # 2 + 2: it can complete
    assert unreachable_gangs(gang, [], reach([8, 8], None)) == frozenset()  # no limit: never out of reach
    assert unreachable_gangs(gang, [], reach([4, 4, 8], 8)) == {key}  # half-free nodes hold no 8-GPU member
    assert unreachable_gangs(gang[:3], [member("g", 3, on="x")], reach([8], 16)) == frozenset()  # 3 left to place
    halves = [member("h", i, gpus=4) for i in range(6)]  # no gang_min: the 6 members seen
    assert unreachable_gangs(halves, [], reach([4, 4, 8], 0)) == {("ml", "h")}  # 1 + 1 + 2 = 4 < 6
    assert unreachable_gangs(halves, [], reach([4, 4, 8], 8)) == frozenset()  # + 2 on a launched node
    assert unreachable_gangs([pod("solo", 8)], [], reach([], 0)) == frozenset()  # not a gang: never out of reach
    l40s = replace(gang[0], request=replace(gang[0].request, gpu_models=("NVIDIA-L40S",)))
    assert unreachable_gangs([l40s], [], reach([8] * 9, None)) == {key}  # its product has nothing at hand
    other = {H100: ProductReach(8, (), 0), "NVIDIA-L40S": ProductReach(8, (), None)}
    assert unreachable_gangs(gang, [], lambda _: other) == frozenset()  # unpinned: another product could launch for it


def test_launch_room_is_each_nodepools_gpu_limit_less_its_nodes_gpus() -> None:
    nodes = [node("a"), node("b"), node("s", "spot"), node("r", "reserved")]
    pools = [limit("on-demand", 40), limit("spot", 8), limit("reserved", 8)]
    assert launch_room_gpus(H100, pools, nodes) == 24 + 0 + 0
    assert launch_room_gpus(H100, [*pools, limit("l40s", None, "NVIDIA-L40S")], nodes) == 24  # another product's
    assert launch_room_gpus(H100, [*pools, limit("big", None)], nodes) is None  # a NodePool with no GPU limit
    assert launch_room_gpus(H100, None, nodes) is None  # NodePools not observed: no bound known
    assert launch_room_gpus(H100, [], nodes) == 0  # Karpenter with no NodePool for it: nothing to launch
    by_name = [ObservedNodePool("od", 64, products=("h100",), gpu=True)]  # a GPU-name pin matches the product
    cpu = ObservedNodePool("cpu", None)  # no GPU sign: a CPU NodePool, no bound on GPU launches
    assert launch_room_gpus(H100, [*by_name, cpu], nodes) == 64
    assert launch_room_gpus(H100, [ObservedNodePool("any-gpu", None, gpu=True)], nodes) is None
    starting = replace(node("s"), spec=replace(node("s").spec, gpu_count=0), ready=False)  # no GPUs shown yet
    assert launch_room_gpus(H100, [limit("on-demand", 40)], [node("a"), starting], {H100: 8}) == 24  # it counts 8
    assert launch_room_gpus(H100, [limit("on-demand", 40)], [node("a"), starting]) == 32  # GPUs per node unknown


SPOT_TAINT = "gpufleet.io/spot=true:NoSchedule"  # gpufleet's spot NodePool and its nodes (fleetobjects.py)
TOLERATES_SPOT = (("gpufleet.io/spot", "Equal", "true", "NoSchedule"),)  # a checkpointable pod's toleration


def spot_node(name: str) -> ObservedNode:
    n = node(name, "spot")
    return replace(n, spec=replace(n.spec, taints=(SPOT_TAINT,)))


def test_a_node_or_nodepool_counts_for_a_gang_only_if_one_of_its_pods_tolerates_its_taints() -> None:
    plain, tolerant = member("g", 0), replace(member("g", 1), tolerations=TOLERATES_SPOT)
    assert not admits([plain], [SPOT_TAINT]) and admits([plain, tolerant], [SPOT_TAINT]) and admits([plain], [])
    assert admits(None, [SPOT_TAINT])  # no pods said: any pod
    # a starting or unwell node's condition and lifecycle taints pass: it counts as it did (a doubt: reach)
    assert admits([plain], ["node.kubernetes.io/not-ready=:NoSchedule", "karpenter.sh/unregistered=:NoExecute"])
    nodes = [node("a"), spot_node("s")]
    pools = [limit("on-demand", 16), replace(limit("spot", 24), taints=(SPOT_TAINT,))]
    assert launch_room_gpus(H100, pools, nodes) == 8 + 16  # any pod
    assert launch_room_gpus(H100, pools, nodes, pods=[plain]) == 8  # the spot NodePool is not its room
    assert launch_room_gpus(H100, pools, nodes, pods=[tolerant]) == 24
    unbounded = [pools[0], replace(limit("spot", None), taints=(SPOT_TAINT,))]
    assert launch_room_gpus(H100, unbounded, nodes, pods=[plain]) == 8  # nor its missing limit
    assert launch_room_gpus(H100, unbounded, nodes, pods=[tolerant]) is None


def test_a_gang_that_does_not_tolerate_spot_is_out_of_reach_with_only_spot_room() -> None:
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    fleet = (node("od"), spot_node("s1"), spot_node("s2"))  # all idle
    full = limit("on-demand", 8)  # its one node: no more on-demand room
    gang = [member("g", i, gang_min=4) for i in range(4)]
    tolerant = [replace(m, tolerations=TOLERATES_SPOT) for m in gang]

    def report(pods: Sequence[ObservedPod], spot_limit: int | None) -> int:
        pools = (full, replace(limit("spot", spot_limit), taints=(SPOT_TAINT,)))
        planner.plan(Observation(T0, fleet, tuple(pods), node_pools=pools))
        return rec.asked[-1].unreachable_gang_gpus

    assert report(gang, 64) == 32  # 1 free on-demand node; 2 free spot nodes and room for 6 more are not its
    assert report(tolerant, 64) == 0  # 1 + 2 + 6 nodes: it can complete
    assert report(gang, None) == 32 and report(tolerant, None) == 0  # an unbounded spot NodePool: the same
    assert report(gang[:1] + tolerant[1:], 64) == 0  # one member tolerates spot: a doubt, reach


DRIVER_TAINT = "nvidia.com/gpu-driver=starting:NoSchedule"  # a GPU operator's readiness taint, removed when ready


def test_a_starting_node_counts_for_a_gang_past_its_nodepools_startup_taints() -> None:
    """Karpenter's startupTaints: pods need not tolerate them (Karpenter expects them removed), so a starting node
    carrying its NodePool's counts for a gang; the same taint not listed as a startup taint, or back on a node
    Karpenter has initialised, keeps it off as any taint; a node of no observed NodePool is read as before."""
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    s = replace(node("s"), ready=False)
    starting = replace(s, spec=replace(s.spec, taints=(DRIVER_TAINT,)))
    full = limit("on-demand", 16)  # its 2 nodes: no room
    startup = replace(full, startup_taints=(DRIVER_TAINT,))
    gang = [member("g", i, gang_min=2) for i in range(2)]

    def report(n: ObservedNode, pool: ObservedNodePool) -> int:
        planner.plan(Observation(T0, (node("a"), n), tuple(gang), node_pools=(pool,)))
        return rec.asked[-1].unreachable_gang_gpus

    assert report(starting, startup) == 0  # idle a + starting s: it can complete
    assert report(starting, full) == 16  # not a startup taint: s is not the gang's
    initialised = replace(starting, spec=replace(starting.spec, labels=("karpenter.sh/initialized=true",)))
    assert report(initialised, startup) == 16  # it came back once Karpenter saw it gone: it lasts
    assert report(replace(starting, node_pool=""), replace(startup, gpu_limit=8)) == 16  # NodePool not known
    assert admits(gang, [DRIVER_TAINT], (DRIVER_TAINT,)) and not admits(gang, [DRIVER_TAINT])
    room = replace(startup, gpu_limit=24)  # startup taints do not narrow a NodePool's room: 24 - 16 GPUs
    assert launch_room_gpus(H100, [room], [node("a"), starting], pods=gang) == 8


def test_the_planner_reports_the_gpus_of_pending_gangs_only_when_all_are_out_of_reach() -> None:
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    fleet = [node("a"), node("b"), replace(node("starting"), ready=False)]
    pools = (limit("on-demand", 40),)  # 24 GPUs in use: 2 more nodes; 2 idle + 1 starting + 2 = 5 nodes
    big = [member("big", i, gang_min=6) for i in range(6)]
    small = [member("small", i, gang_min=5) for i in range(5)]

    def report(pods: Sequence[ObservedPod], node_pools: tuple[ObservedNodePool, ...] | None = pools) -> int:
        planner.plan(Observation(T0, tuple(fleet), tuple(pods), node_pools=node_pools))
        return rec.asked[-1].unreachable_gang_gpus

    assert report(big) == 48
    assert report(big + [member("big2", i, gang_min=6) for i in range(6)]) == 96  # each pod once
    assert report(big + small) == 0  # the 5-node gang can complete: it holds as any pending work
    assert report([*big, pod("solo", 1)]) == 0  # work an idle node could serve
    assert report(big, None) == 0  # no NodePools observed: room unknown
    assert report(big, (limit("on-demand", None),)) == 0
    fleet[2] = replace(fleet[2], spec=replace(fleet[2].spec, gpu_count=0))  # its GPUs not yet allocatable
    assert report(big) == 48 and report(big + small) == 0  # the same reach: it counts once, as a starting node


def test_an_idle_node_goes_at_its_break_even_while_only_a_gang_out_of_reach_is_pending() -> None:
    """Against the loop's scaler: a 32-node gang with NodePool room for 20 nodes does not hold the idle node beyond
    its rent-or-buy break-even; a gang that fits holds it as any pending work."""
    buy_s = rent_or_buy_hold_s(600, 60, LOOP_DELAY_WEIGHT, 1.0)

    def first_release(gang_nodes: int) -> tuple[float, str] | None:
        planner = NodeReleasePlanner(ControlLoop.gpufleet(0).node_scaler, BUILTIN_PRICE_CATALOG, node_start_s=600)
        gang = [member("llm", i, gang_min=gang_nodes) for i in range(gang_nodes)]
        t = 0.0
        while t < 3 * buy_s:
            got = planner.plan(Observation(T0 + t, (node("idle"),), tuple(gang), node_pools=(limit("on-demand", 160),)))
            if got:
                return t, got[0].reason
            t += 60
        return None

    out = first_release(32)
    assert out is not None and buy_s <= out[0] < buy_s + 60 and out[1] == "unneeded_below_threshold"
    assert first_release(20) is None  # 1 idle + 19 launchable: it can complete


@settings(max_examples=100, deadline=None)
@example(["on-demand", "spot"], [12], {"on-demand": 8, "spot": 0}, [((), True, 0, 600)] * 10)  # nodes go
@example(["on-demand", "starting"], [3], {"on-demand": 16, "spot": None}, [((), True, 0, 600)] * 10)  # spot: no limit
@example(["on-demand", "startup-tainted"], [2], {"on-demand": 16, "spot": 0}, [((), True, 0, 600)])  # it counts
@given(
    kinds=st.lists(
        st.sampled_from(["on-demand", "spot", "reserved", "cordoned", "starting", "startup-tainted"]),
        min_size=1,
        max_size=6,
    ),
    gangs=st.lists(st.integers(1, 12), min_size=1, max_size=3),  # gangs of 8-GPU pods (their sizes)
    limits=st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {k: st.one_of(st.none(), st.integers(0, 6).map(lambda n: 8 * n)) for k in ("on-demand", "spot")}
        ),
    ),
    looks=st.lists(
        st.tuples(
            st.sampled_from([(), (), (0,), (1, 2)]),  # nodes (by index) with a running pod
            st.booleans(),  # the gangs are pending
            st.sampled_from([0, 0, 0, 1]),  # pending pods not in a gang
            st.integers(300, 3600),  # seconds since the previous look
        ),
        min_size=1,
        max_size=15,
    ),
)
def test_with_pending_work_that_is_not_a_gang_out_of_reach_nothing_is_released(
    kinds: list[str],
    gangs: list[int],
    limits: dict[str, int | None] | None,
    looks: list[tuple[tuple[int, ...], bool, int, int]],
) -> None:
    """Invariant (as test_nodes_payoff's): the report equals a count done here by hand (8-GPU nodes and members:
    reach = free uncordoned nodes + starting nodes, some carrying their NodePool's startup taint + the NodePools'
    room in nodes), and while any pending pod is
    not in a gang out of reach, nothing is released (today's code, which never reports, holds everything then)."""
    asked: list[ScaleDownContext] = []
    scaler = ControlLoop.gpufleet(0).node_scaler

    class Watch:
        min_idle_s = scaler.min_idle_s

        def nodes_to_launch(self, ctx: ScaleUpContext) -> int:
            return 0

        def scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]:
            asked.append(ctx)
            return scaler.scale_down(ctx)

        def moves(self, ctx: MoveContext) -> list[tuple[int, str]]:
            return []

    planner = NodeReleasePlanner(Watch(), BUILTIN_PRICE_CATALOG)
    fleet = {}
    for i, k in enumerate(kinds):
        capacity = k if k in ("on-demand", "spot", "reserved") else "on-demand"
        n = replace(node(f"n{i}", capacity, cordoned=k == "cordoned"), ready=not k.startswith("start"))
        fleet[f"n{i}"] = replace(n, spec=replace(n.spec, taints=(DRIVER_TAINT,))) if k == "startup-tainted" else n
    pools = (
        None
        if limits is None
        else tuple(replace(limit(k, v), startup_taints=(DRIVER_TAINT,)) for k, v in limits.items())
    )
    t = 0.0
    for busy_at, queued, solo, dt in looks:
        t += dt
        running = [pod(f"r{i}", 8, on=f"n{i}") for i in busy_at if f"n{i}" in fleet]
        sizes = gangs if queued else []
        waiting = [member(f"g{j}", i, gang_min=size) for j, size in enumerate(sizes) for i in range(size)]
        waiting += [pod(f"w{j}", 8) for j in range(solo)]
        before = len(asked)
        released = planner.plan(Observation(T0 + t, tuple(fleet.values()), tuple(running + waiting), node_pools=pools))
        busy = {p.node for p in running}
        ns = list(fleet.values())
        free = sum(1 for n in ns if not n.unschedulable and n.name not in busy)  # Ready or starting
        if pools is None or any(p.gpu_limit is None for p in pools):
            room = None
        else:
            room = sum(max(0, p.gpu_limit - 8 * sum(n.node_pool == p.name for n in ns)) for p in pools if p.gpu_limit)
        out = [size for size in sizes if room is not None and free + room // 8 < size]
        expect = 8 * sum(out) if waiting and not solo and len(out) == len(sizes) else 0
        if len(asked) > before:
            assert asked[-1].unreachable_gang_gpus == expect
        if waiting and expect == 0:
            assert released == ()
        for r in released:
            n = fleet.pop(r.node)
            assert n.capacity_type in ("on-demand", "spot") and n.schedulable and r.node not in busy


# -- the start buffer's hold (control/start_buffer.py) on a cluster ------------------------------------------------


def stamp(t: float) -> str:
    """``T0 + t`` as Kubernetes writes a creationTimestamp."""
    return datetime.fromtimestamp(T0 + t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(name: str, created: float | str, started: float | None = None, on: str = "", *, kind: str = "training",
        gpus: int = 8, models: tuple[str, ...] = (), gang: str = "", phase: str = "") -> ObservedPod:  # fmt: skip
    """A pod created at ``T0 + created`` (or a raw timestamp), started (``status.startTime``) at ``T0 + started``;
    ``started`` None: as the adapter reads a pod without startTime, ``started_s`` falls back to the creation."""
    raw = stamp(created) if isinstance(created, float | int) else created
    fallback = rfc3339_s(raw)
    req = PodRequest(f"ml/{name}", 1000, 1024, gpus, 1000, gpu_models=models)
    return ObservedPod(req, "ml", name, f"uid-{name}", phase or ("Running" if on else "Pending"), node=on,
                       kind=kind, gang=gang, created=raw,
                       started_s=T0 + started if started is not None else fallback)  # fmt: skip


def test_rfc3339_times_are_read_robustly() -> None:
    assert rfc3339_s("2027-01-15T08:00:00Z") == datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()
    assert rfc3339_s("2027-01-15T08:00:00.5z") == datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp() + 0.5
    assert rfc3339_s("2027-01-15T10:00:00+02:00") == datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()
    assert rfc3339_s("2027-01-15T08:00:00") == datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()  # no zone: UTC
    assert rfc3339_s("") is None and rfc3339_s("yesterday") is None and rfc3339_s("2027-13-45T99:00:00Z") is None


def test_late_starts_reads_training_jobs_of_the_window_by_creation_and_start() -> None:
    pods = [
        job("on-time", -1000.0, -990.0, on="a"),  # started 10 s after arriving
        job("late", -2000.0, -1900.0, on="a"),  # 100 s > 60 s
        job("waiting", -120.0),  # not bound, waits 120 s: late
        job("just-arrived", -30.0),  # not bound, 30 s: not yet late
        job("no-start-time", -300.0),  # not bound, started_s fell back to its creation: late by now - created
        job("unparsable", "yesterday"),  # skipped
        job("serving", -500.0, kind="serving"),  # not training
        job("old", -7 * 3600.0, -6 * 3600.0, on="a"),  # arrived before the window
        job("l40s", -200.0, models=("NVIDIA-L40S",)),  # may not run on the H100
        job("elsewhere", -200.0, -50.0, on="l40s-node"),  # bound to a node of another product
        job("cpu", -200.0, gpus=0),
        job("gone", -400.0, phase="Failed"),  # left without a start: when is not seen
        job("g-0", -900.0, -890.0, on="a", gang="g"),  # a gang is one job, late when a member is
        job("g-1", -900.0, -700.0, on="b", gang="g"),
    ]
    on = {"a": H100, "b": H100, "l40s-node": "NVIDIA-L40S"}
    assert late_starts(pods, H100, T0, 6 * 3600, 60, on) == (6, 4)  # on-time, late, 3 unbound, the gang
    assert late_starts(pods, H100, T0, 6 * 3600, 600, on) == (6, 0)  # nobody waited 10 min
    assert late_starts(pods, "NVIDIA-L40S", T0, 6 * 3600, 60, on) == (5, 4)  # the unbound pods that may run there
    assert late_starts([job("w", -300.0)], H100, T0, 6 * 3600, 60) == (1, 1)  # no node map: unbound pods only


def _held(buffer: StartBuffer | None, started_after_s: float) -> tuple[NodeReleasePlanner, float | None]:
    """An H100 on-demand node busy with a training job that started ``started_after_s`` after arriving, beside an
    idle on-demand node, under the loop's node scaler: when (seconds) the idle node is released within 3 h."""
    planner = NodeReleasePlanner(ControlLoop.gpufleet(0).node_scaler, BUILTIN_PRICE_CATALOG, buffer=buffer)
    fleet = [node("busy"), node("idle")]
    running = [job("train", -1800.0, -1800.0 + started_after_s, on="busy")]
    t = 0.0
    while t < 3 * 3600:
        if planner.plan(obs(t, fleet, running)):
            return planner, t
        t += 60
    return planner, None


def test_the_start_buffer_keeps_an_idle_on_demand_node_while_training_starts_late() -> None:
    """The loop's start buffer (setpoint 1.0, two nodes) asks for nodes when the one job of the window started late:
    the idle on-demand node that the loop's scaler would release at its break-even (3,060 s) is kept; with the job
    on time (or no buffer) the buffer is 0 and the node goes as before."""
    buffer = ControlLoop.gpufleet(0).start_buffer
    assert buffer is not None
    held, at = _held(buffer, 300.0)
    assert at is None
    d = held.buffer_decisions[H100]  # stepped up hourly while the job counts as late, to the loop's max_nodes
    assert d.nodes == buffer.max_nodes == 2 and d.late_share == 1.0 and d.reason.startswith("start_buffer")
    released, at = _held(StartBuffer(setpoint=1.0, max_nodes=1), 10.0)
    assert at is not None and 3000 <= at <= 3120 and released.buffer_decisions[H100].nodes == 0
    _, unbuffered = _held(None, 300.0)
    assert unbuffered == at


def test_the_buffer_is_stepped_hourly_and_counts_free_gpus_of_every_tier_but_spot() -> None:
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG, buffer=StartBuffer(setpoint=1.0, max_nodes=1))
    fleet = [node("busy"), node("idle"), node("spot-idle", "spot"), node("res-idle", "reserved"),
             node("cordoned", cordoned=True), node("l40s", product="NVIDIA-L40S")]  # fmt: skip
    late = [job("late", -600.0, -400.0, on="busy", gpus=6)]
    planner.plan(obs(0, fleet, late))  # the first plan decides at once
    by_sku = {c.sku_id: c for c in rec.asked}
    assert by_sku[H100].keep_free_gpus == 8 and by_sku[H100].buffer_free_gpus == 2 + 8 + 8  # busy, idle, reserved
    assert by_sku["NVIDIA-L40S"].keep_free_gpus == 0 and by_sku["NVIDIA-L40S"].buffer_free_gpus == 0
    assert planner.buffer_decisions["NVIDIA-L40S"].nodes == 0  # the job ran on an H100 node
    on_time = late + [job(f"ok-{i}", 1000.0 + i, 1010.0 + i, on="busy", gpus=0 if i else 1) for i in range(60)]
    planner.plan(obs(1800, fleet, on_time))
    assert rec.asked[-2].keep_free_gpus == 8  # H100 (sorted first): not stepped within the hour
    planner.plan(obs(3600, fleet, on_time))  # stepped: 1 late of 2 GPU jobs (the CPU pods do not count)
    assert planner.buffer_decisions[H100].nodes == 1
    many = late + [job(f"ok-{i}", 1000.0 + i, 1010.0 + i, on="busy", gpus=1) for i in range(60)]
    planner.plan(obs(7200, fleet, many))  # 1 late of 61 (1.6 % < half the 5 % aim): one node down
    assert planner.buffer_decisions[H100].nodes == 0 and rec.asked[-2].keep_free_gpus == 0
