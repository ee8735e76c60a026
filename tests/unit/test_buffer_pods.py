"""The start buffer's top-up in a cluster (control/buffer_pods.py): placeholder pods created for the missing buffer
nodes through the buffer's launch rule, deleted beyond it (pending ones first); placeholders are no training job,
no pending work, their GPUs free for the scaler and the binder's preemption, their node busy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpufleet.adapters.kubernetes.bufferpods import PRIORITY, PRIORITY_CLASS, placeholder, priority_class
from gpufleet.adapters.kubernetes.labels import pod_from_json
from gpufleet.control.binding import BindingPlanner
from gpufleet.control.buffer_pods import (
    SPOT_SELECTOR,
    SPOT_TAINT,
    BufferPods,
    placeholder_lane,
    placeholder_product,
    plan_buffer_pods,
)
from gpufleet.control.buffer_reading import late_starts, spot_capacity
from gpufleet.control.loop import ControlLoop
from gpufleet.control.node_release import NodeReleasePlanner
from gpufleet.control.observation import Observation, ObservedNode, ObservedNodePool, ObservedPod
from gpufleet.control.preempting import running_job
from gpufleet.control.start_buffer import BufferDecision, StartBuffer, spot_lane
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.schedule.table import NodeSpec, PodRequest
from tests.unit.test_node_release import Recorder, job, obs

H100 = "NVIDIA-H100-80GB-HBM3"
T0 = 1_800_000_000.0


def node(name: str, capacity: str = "on-demand") -> ObservedNode:
    spec = NodeSpec(name, 192_000, 2_000_000, 8, H100)
    return ObservedNode(spec, sku=H100, capacity_type=capacity, node_pool=capacity, created_s=T0 - 3600)


def holder(name: str, on: str = "", created: str = "2027-01-15T08:00:00Z", spot: bool = False) -> ObservedPod:
    """A placeholder as the controller creates it (of the spot lane if ``spot``), read back as the informer reads
    it."""
    body = placeholder(H100, 8, "kube-system", "gpufleet", spot=spot)
    body["metadata"].update(name=name, uid=f"uid-{name}", creationTimestamp=created)
    body["spec"].update(priority=PRIORITY, preemptionPolicy="Never")  # the API server's Priority admission fills them
    if on:
        body["spec"]["nodeName"] = on
        body["status"] = {"phase": "Running", "startTime": "2027-01-15T08:00:01Z"}
    return pod_from_json(body)


def real(name: str, gpus: int, on: str = "", priority: int = 0) -> ObservedPod:
    req = PodRequest(f"ml/{name}", 1000, 1024, gpus, 1000)
    return ObservedPod(req, "ml", name, f"uid-{name}", "Running" if on else "Pending", node=on,
                       scheduler_name="gpufleet", priority=priority, created="2027-01-15T08:00:00Z")  # fmt: skip


def plan(nodes: Sequence[ObservedNode], pods: Sequence[ObservedPod], want: int) -> tuple[BufferPods, ...]:
    decided = {H100: BufferDecision(want, 0.5, "start_buffer: test")}
    return plan_buffer_pods(Observation(T0, tuple(nodes), tuple(pods)), decided, StartBuffer(max_nodes=2))


def test_a_placeholder_reads_back_as_one_whole_node_of_its_product_of_the_buffer_class() -> None:
    p = holder("b1")
    assert p.buffer and p.request.num_gpu == 8 and not p.preempts and p.priority == PRIORITY < 0
    assert f"nvidia.com/gpu.product={H100}" in p.request.node_selector and p.scheduler_name == "gpufleet"
    assert not p.tolerations  # not spot's taint: the buffer is for jobs that may not use spot
    pc = priority_class()
    assert pc["metadata"]["name"] == PRIORITY_CLASS and pc["value"] == PRIORITY and pc["preemptionPolicy"] == "Never"
    assert pc["globalDefault"] is False


def test_placeholders_are_created_for_the_missing_nodes_and_none_when_free_or_pending() -> None:
    busy = [node("a"), node("b")], [real("t1", 8, on="a"), real("t2", 4, on="b")]  # 4 free: half a node
    (got,) = plan(*busy, want=1)
    assert (got.create, got.delete, got.per_node, got.want_nodes) == (1, (), 8, 1)  # top_up_at 0: at once
    (got,) = plan(*busy, want=2)
    assert got.create == 2  # 16 - 4 missing: two whole nodes
    assert plan(busy[0], [*busy[1], holder("b1")], want=1) == ()  # one pending: Karpenter launches its node
    assert plan([*busy[0], node("c")], busy[1], want=1) == ()  # a whole free on-demand node holds the buffer
    assert plan([*busy[0], node("c")], [*busy[1], holder("b1", on="c")], want=1) == ()  # so does a bound placeholder
    (got,) = plan([*busy[0], node("s", "spot")], busy[1], want=1)
    assert got.create == 1  # free spot GPUs do not count
    assert plan(*busy, want=0) == ()


def test_placeholders_beyond_the_buffer_are_deleted_pending_ones_first() -> None:
    nodes = [node("a"), node("c")]
    pods = [real("t", 8, on="a"), holder("bound", on="c"), holder("old", created="2027-01-15T07:00:00Z"), holder("new")]
    (got,) = plan(nodes, pods, want=2)
    assert got.create == 0 and got.delete == ("kube-system/new",)  # one bound, one node missing: one pending too many
    (got,) = plan([*nodes, node("d")], pods, want=2)
    assert got.delete == ("kube-system/new", "kube-system/old")  # a node came free: no pending one is needed
    (got,) = plan(nodes, pods, want=1)
    assert got.delete == ("kube-system/new", "kube-system/old")  # the bound one holds the buffer
    (got,) = plan(nodes, pods, want=0)
    assert got.delete == ("kube-system/new", "kube-system/old", "kube-system/bound") and got.create == 0
    assert plan(nodes, [real("t", 8, on="a")], want=0) == ()


def test_placeholders_are_no_training_jobs_no_pending_work_and_free_gpus_but_their_node_is_busy() -> None:
    now = T0 + 7200
    pending_holder = holder("p", created="2027-01-15T08:00:00Z")
    stamp_now = "2027-01-15T08:00:00Z"
    assert late_starts([pending_holder], H100, pending_holder.started_s or now, 6 * 3600, 60) == (0, 0)
    waiting = real("w", 8)
    waiting = ObservedPod(waiting.request, "ml", "w", "uid-w", "Pending", created=stamp_now, scheduler_name="gpufleet")
    assert late_starts([waiting], H100, (pending_holder.started_s or now) + 120, 6 * 3600, 60) == (1, 1)
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    fleet = (node("a"), node("c"))
    planner.plan(Observation(now, fleet, (holder("on-c", on="c"), pending_holder)))
    (ctx,) = rec.asked
    assert ctx.pending_gpus == 0  # the pending placeholder does not hold the idle node
    assert ctx.free_gpus == 16 and ctx.demand_now_gpus == 0  # the bound one's GPUs are free
    planner.plan(Observation(now + 700, fleet, (holder("on-c", on="c"), pending_holder)))
    assert [i.node_id for i in rec.asked[-1].idle] == [planner._ids["a"]]  # c holds a placeholder: not offered


def test_a_real_pod_preempts_a_placeholder_through_gpufleets_preemption_at_no_loss() -> None:
    now = T0 + 30 * 86400  # the placeholder has held its node for a month: still nothing lost
    job = running_job(holder("b", on="a"), 0, int(now))
    assert job.priority < 0 and job.min_runtime_s == 0 and job.restart_s == 0
    planner = BindingPlanner(scheduler_name="gpufleet")
    o = Observation(now, (node("a"),), (holder("b", on="a"), real("train", 8)))
    bound = planner.plan(o)
    assert not bound.binds and [u.pod for u in bound.unschedulable] == ["ml/train"]
    decisions, none = planner.preempt(o, bound.unschedulable)
    assert none == () and len(decisions) == 1
    (d,) = decisions
    assert d.nodes == ("a",) and [v.pod for v in d.victims] == ["kube-system/b"] and d.lost_gpu_h == 0
    assert d.victims[0].action == "stop"  # no checkpoint handshake to wait for


# -- the start buffer's spot lane (StartBuffer.spot) on a cluster ---------------------------------------------------

SPOT = spot_lane(H100)


def tolerant(name: str, created: float, started: float | None = None, on: str = "", gang: str = "") -> ObservedPod:
    """A training pod that tolerates gpufleet's spot taint (checkpointed training: the spot lane's)."""
    p = job(name, created, started, on=on, gang=gang)
    return replace(p, tolerations=(("gpufleet.io/spot", "Equal", "true", "NoSchedule"),))


def lanes(nodes: Sequence[ObservedNode], pods: Sequence[ObservedPod], **want: int) -> dict[str, BufferPods]:
    decided = {H100 if k == "od" else SPOT: BufferDecision(n, 0.5, "start_buffer: test") for k, n in want.items()}
    got = plan_buffer_pods(Observation(T0, tuple(nodes), tuple(pods)), decided, StartBuffer(max_nodes=2))
    return {p.lane: p for p in got}


def test_a_spot_placeholder_selects_spot_nodes_tolerates_the_spot_taint_and_reads_back_in_the_spot_lane() -> None:
    body = placeholder(H100, 8, "kube-system", "gpufleet", spot=True)
    assert body["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": H100, "karpenter.sh/capacity-type": "spot"}
    assert body["spec"]["tolerations"] == [
        {"key": "gpufleet.io/spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]
    assert body["metadata"]["labels"]["gpufleet.io/buffer-lane"] == "spot"
    assert body["spec"]["priorityClassName"] == PRIORITY_CLASS
    p = holder("s1", spot=True)
    assert p.buffer and p.tolerates(SPOT_TAINT) and SPOT_SELECTOR in p.request.node_selector
    assert placeholder_product(p) == H100 and placeholder_lane(p) == SPOT
    plain = placeholder(H100, 8, "kube-system", "gpufleet")
    assert "tolerations" not in plain["spec"] and "gpufleet.io/buffer-lane" not in plain["metadata"]["labels"]
    assert placeholder_lane(holder("b1")) == H100 and not holder("b1").tolerates(SPOT_TAINT)


def test_each_lane_counts_its_own_free_gpus_and_creates_and_deletes_only_its_own_placeholders() -> None:
    busy = [node("a")], [real("t", 8, on="a")]
    got = lanes(*busy, spot=1)
    assert list(got) == [SPOT] and got[SPOT].spot and got[SPOT].create == 1 and got[SPOT].per_node == 8
    assert lanes([*busy[0], node("c")], busy[1], spot=1)[SPOT].create == 1  # free on-demand GPUs do not count
    assert lanes([*busy[0], node("s", "spot")], busy[1], spot=1) == {}  # a free spot node holds the spot lane
    got = lanes([*busy[0], node("s", "spot")], busy[1], od=1, spot=1)
    assert list(got) == [H100] and not got[H100].spot and got[H100].create == 1  # free spot GPUs: not for jobs off spot
    pods = [*busy[1], holder("p"), holder("ps", spot=True)]  # one pending placeholder in each lane
    assert lanes(busy[0], pods, od=1, spot=1) == {}  # each lane's pending placeholder is its node starting
    got = lanes(busy[0], pods, od=0, spot=1)
    assert list(got) == [H100] and got[H100].delete == ("kube-system/p",)  # the spot one stays
    got = lanes(busy[0], pods, od=1, spot=0)
    assert list(got) == [SPOT] and got[SPOT].delete == ("kube-system/ps",)  # the one off spot stays
    got = lanes(busy[0], pods, od=1)  # no decision for the spot lane (StartBuffer.spot off): its placeholders go
    assert list(got) == [SPOT] and got[SPOT].delete == ("kube-system/ps",)


def test_late_starts_splits_the_jobs_by_their_toleration_of_the_spot_taint_a_gang_by_any_member() -> None:
    pods = [
        job("plain-late", -600.0, -400.0, on="a"),
        job("plain-ok", -600.0, -595.0, on="a"),
        tolerant("ckpt-late", -600.0, -300.0, on="s"),
        job("g-0", -900.0, -890.0, on="a", gang="g"),  # a gang with one tolerating member: the spot lane's
        tolerant("g-1", -900.0, -700.0, on="s", gang="g"),
    ]
    on = {"a": H100, "s": H100}
    assert late_starts(pods, H100, T0, 6 * 3600, 60, on) == (4, 3)
    assert late_starts(pods, H100, T0, 6 * 3600, 60, on, may_use_spot=False) == (2, 1)
    assert late_starts(pods, H100, T0, 6 * 3600, 60, on, may_use_spot=True) == (2, 2)


def _released(
    buffer: StartBuffer | None, fleet: Sequence[ObservedNode], pods: Sequence[ObservedPod]
) -> dict[str, float]:
    """The nodes the loop's node scaler releases within 5 h (planned each minute), and when."""
    planner = NodeReleasePlanner(ControlLoop.gpufleet(0).node_scaler, BUILTIN_PRICE_CATALOG, buffer=buffer)
    gone: dict[str, float] = {}
    t = 0.0
    while t < 5 * 3600:
        for r in planner.plan(obs(t, [n for n in fleet if n.name not in gone], pods)):
            gone[r.node] = t
        t += 60
    return gone


def test_the_spot_lane_is_read_priced_at_spot_and_keeps_an_idle_spot_node_under_the_loops_scaler() -> None:
    """A checkpointed job started late: the spot lane steps to a node; under the loop's node scaler the idle spot
    node (released after 3.9 h without a buffer) is kept for it (``keep_free_spot_gpus``) while the idle on-demand
    nodes go at their break-even. With the lanes off the same job asks for a node off spot: one on-demand node is
    kept."""
    scaler = Recorder()
    planner = NodeReleasePlanner(scaler, BUILTIN_PRICE_CATALOG, buffer=StartBuffer(setpoint=1.0, spot=True))
    fleet = [node("busy"), node("idle"), node("spot-idle", "spot"), node("spot-busy", "spot")]
    late = [tolerant("ckpt", -1800.0, -1500.0, on="spot-busy")]
    planner.plan(obs(0, fleet, late))
    assert planner.buffer_decisions[SPOT].nodes == 1 and planner.buffer_decisions[H100].nodes == 0
    (ctx,) = scaler.asked
    assert (ctx.keep_free_gpus, ctx.buffer_free_gpus, ctx.keep_free_spot_gpus, ctx.spot_free_gpus) == (0, 0, 8, 8)
    price = BUILTIN_PRICE_CATALOG.list_price("h100_80gb")
    assert price is not None and planner._spot_usd(H100) == float(price.spot) < planner._on_demand_usd(H100)
    assert _released(None, fleet, late) == {"busy": 3060, "idle": 3060, "spot-idle": 13920}
    assert _released(StartBuffer(setpoint=1.0, spot=True), fleet, late) == {"busy": 3060, "idle": 3060}
    assert _released(StartBuffer(setpoint=1.0), fleet, late) == {"busy": 3060}
    both = [*late, job("plain", -1800.0, -1500.0, on="busy")]  # one late job in each lane: spot is cheaper
    planner = NodeReleasePlanner(Recorder(), BUILTIN_PRICE_CATALOG, buffer=StartBuffer(setpoint=1.0, spot=True))
    planner.plan(obs(0, fleet, both))
    assert planner.buffer_decisions[SPOT].nodes == 1 and planner.buffer_decisions[H100].nodes == 0


def test_without_spot_capacity_or_with_spot_off_the_buffer_reads_one_key_per_product_as_before() -> None:
    fleet = [node("busy"), node("idle")]
    late = [tolerant("ckpt", -600.0, -400.0, on="busy")]
    for buffer, pools in ((StartBuffer(setpoint=1.0), None), (StartBuffer(setpoint=1.0, spot=True), ())):
        rec = Recorder()
        planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG, buffer=buffer)
        planner.plan(Observation(T0, tuple(fleet), tuple(late), node_pools=pools))  # no NodePool launches spot
        assert list(planner.buffer_decisions) == [H100] and planner.buffer_decisions[H100].nodes == 1
        assert rec.asked[-1].keep_free_gpus == 8 and rec.asked[-1].keep_free_spot_gpus == 0
    spot_pool = ObservedNodePool("spot", 64, products=(H100,), capacity_types=("spot",), gpu=True)
    assert spot_capacity(H100, (spot_pool,), fleet) and not spot_capacity("NVIDIA-L40S", (spot_pool,), fleet)
    assert spot_capacity(H100, None, fleet)  # no Karpenter observed: the catalog's spot price decides
    assert spot_capacity(H100, (), [*fleet, node("s", "spot")])  # a spot node of the product
