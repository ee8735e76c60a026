"""The start buffer's top-up in a cluster (control/buffer_pods.py): placeholder pods created for the missing buffer
nodes through the buffer's launch rule, deleted beyond it (pending ones first); placeholders are no training job,
no pending work, their GPUs free for the scaler and the binder's preemption, their node busy."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.adapters.kubernetes.bufferpods import PRIORITY, PRIORITY_CLASS, placeholder, priority_class
from gpufleet.adapters.kubernetes.labels import pod_from_json
from gpufleet.control.binding import BindingPlanner
from gpufleet.control.buffer_pods import BufferPods, plan_buffer_pods
from gpufleet.control.node_release import NodeReleasePlanner, late_starts
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.control.preempting import running_job
from gpufleet.control.start_buffer import BufferDecision, StartBuffer
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.schedule.table import NodeSpec, PodRequest
from tests.unit.test_node_release import Recorder

H100 = "NVIDIA-H100-80GB-HBM3"
T0 = 1_800_000_000.0


def node(name: str, capacity: str = "on-demand") -> ObservedNode:
    spec = NodeSpec(name, 192_000, 2_000_000, 8, H100)
    return ObservedNode(spec, sku=H100, capacity_type=capacity, node_pool=capacity, created_s=T0 - 3600)


def holder(name: str, on: str = "", created: str = "2027-01-15T08:00:00Z") -> ObservedPod:
    """A placeholder as the controller creates it, read back as the informer reads it."""
    body = placeholder(H100, 8, "kube-system", "gpufleet")
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
