"""The replica spread in the Kubernetes binder (control/binding.BindingPlanner with the loop's ReplicaSpread): a
serving fleet's replicas go to nodes under the cap, in the capacity type the policy takes; a preference only (a
pod the plain binder binds is bound, on a node where it fits); training, gangs and bare pods are unchanged."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters.kubernetes.controller import ControllerConfig
from gpufleet.control.binding import BindingPlanner
from gpufleet.control.binding_spread import REASON_SPREAD, serving_fleet
from gpufleet.control.loop import ControlLoop
from gpufleet.control.observation import Observation, ObservedDeployment, ObservedNode, ObservedPod
from gpufleet.control.placement import ReplicaSpread
from gpufleet.domain.pools import Tier
from gpufleet.schedule.table import NodeSpec, PodRequest

SPREAD = ControlLoop.gpufleet(0).replica_spread  # the loop's object, as the controller takes it
assert SPREAD is not None
ORDER = ("reserved", "on-demand")


def _node(name: str, gpus: int = 8, kind: str = "") -> ObservedNode:
    return ObservedNode(NodeSpec(name, 64_000, 512 * 1024, gpus, "H100"), sku="H100", capacity_type=kind)


def _pod(name: str, gpus: int = 1, *, fleet: str = "", node: str = "", kind: str = "serving", ns: str = "ns",
         gang: str = "", owner_kind: str = "ReplicaSet", created: str = "2026-01-01T00:00:00Z") -> ObservedPod:  # fmt: skip
    req = PodRequest(f"{ns}/{name}", 1000, 1024, gpus, 1000 if gpus else 0)
    owner = f"{fleet}-5d8f" if fleet and owner_kind == "ReplicaSet" else fleet
    return ObservedPod(req, ns, name, f"uid-{ns}-{name}", "Running" if node else "Pending", node=node,
                       scheduler_name="gpufleet", kind=kind, gang=gang, gang_min=2 if gang else 0,
                       owner_kind=owner_kind if fleet else "", owner_name=owner, created=created)  # fmt: skip


def _obs(nodes: list[ObservedNode], pods: list[ObservedPod], deps: tuple[ObservedDeployment, ...] = ()) -> Observation:
    return Observation(0.0, tuple(nodes), tuple(pods), deps)


def _per_node(binds: tuple[object, ...]) -> Counter[str]:
    return Counter(b.node for b in binds)  # type: ignore[attr-defined]


def test_eight_replicas_on_four_nodes_are_spread_at_most_the_cap_a_node() -> None:
    nodes = [_node(f"n{i}") for i in range(4)]
    pods = [_pod(f"web-{i}", fleet="web") for i in range(8)]
    plain = BindingPlanner().plan(_obs(nodes, pods))
    assert list(_per_node(plain.binds).values()) == [8]  # the packing policy alone puts them all on one node
    plan = BindingPlanner(spread=SPREAD).plan(_obs(nodes, pods))
    assert len(plan.binds) == 8 and not plan.unschedulable
    assert sorted(_per_node(plan.binds).values()) == [2, 2, 2, 2]  # cap = ceil(0.25 * 8)
    reasons = Counter(b.reason for b in plan.binds)
    assert reasons[REASON_SPREAD] > 0 and set(reasons) == {"placed", REASON_SPREAD}


def test_replicas_already_bound_and_in_flight_count_and_chunks_decide_the_same() -> None:
    nodes = [_node(f"n{i}") for i in range(4)]
    bound = [_pod(f"web-b{i}", fleet="web", node="n0") for i in range(2)]
    pending = [_pod(f"web-{i}", fleet="web") for i in range(6)]
    one = BindingPlanner(spread=SPREAD).plan(_obs(nodes, bound + pending))
    assert all(b.node != "n0" for b in one.binds)  # n0 holds the cap (2 of 8) already
    assert sorted(_per_node(one.binds).values()) == [2, 2, 2]
    pl = BindingPlanner(spread=SPREAD)  # in chunks of 2 on one observation: in-flight replicas count
    obs = _obs(nodes, bound + pending)
    got, done = [], set[str]()
    while True:
        part = pl.plan(obs, max_units=2, exclude=frozenset(done))
        got += [(b.pod, b.node, b.reason) for b in part.binds]
        done |= {b.pod for b in part.binds}
        if part.remaining == 0:
            break
    assert got == [(b.pod, b.node, b.reason) for b in one.binds]


def test_replicas_in_flight_count_on_the_next_tick() -> None:
    nodes = [_node(f"n{i}") for i in range(4)]
    dep = (ObservedDeployment("ns", "web", replicas=4, ready_replicas=0, kind="serving"),)  # cap 1
    a = _pod("web-a", fleet="web")
    pl = BindingPlanner(spread=SPREAD)
    (first,) = pl.plan(_obs(nodes, [a], dep)).binds
    b = _pod("web-b", fleet="web", created="2026-01-02T00:00:00Z")
    (second,) = pl.plan(_obs(nodes, [a, b], dep)).binds  # a not seen bound yet: in flight on its node
    assert second.pod == "ns/web-b" and second.node != first.node and second.reason == REASON_SPREAD


def test_a_full_cluster_still_binds_the_replica_where_the_policy_puts_it() -> None:
    nodes = [_node("n0"), _node("n1")]
    other = [_pod("train", 8, node="n0", kind="training")]  # n0 is full
    bound = [_pod(f"web-b{i}", fleet="web", node="n1") for i in range(4)]
    plan = BindingPlanner(spread=SPREAD).plan(_obs(nodes, [*other, *bound, _pod("web-new", fleet="web")]))
    (b,) = plan.binds
    assert b.node == "n1" and b.reason == "placed"  # n1 is far over the cap (4 of 5 >= 2) but the only room


def test_the_spread_stays_in_the_capacity_type_the_policy_takes() -> None:
    nodes = [_node("od-0", kind="on-demand"), _node("res-0", kind="reserved"), _node("res-1", kind="reserved")]
    bound = [_pod(f"web-b{i}", fleet="web", node=f"res-{i % 2}") for i in range(4)]
    plan = BindingPlanner(tier_order=ORDER, spread=SPREAD).plan(_obs(nodes, [*bound, _pod("web-new", fleet="web")]))
    (b,) = plan.binds  # both reserved nodes hold the cap (2 of 5); the on-demand node is never taken for it
    assert b.node.startswith("res-") and b.reason == "placed"
    # a spread restricted to on-demand does not act on reserved nodes
    only_od = ReplicaSpread(0.25, (Tier.ON_DEMAND,))
    pods = [_pod(f"web-{i}", fleet="web") for i in range(8)]
    res = [_node(f"res-{i}", kind="reserved") for i in range(4)]
    a = BindingPlanner(tier_order=ORDER, spread=only_od).plan(_obs(res, pods))
    b2 = BindingPlanner(tier_order=ORDER).plan(_obs(res, pods))
    assert [(x.pod, x.node, x.reason) for x in a.binds] == [(x.pod, x.node, x.reason) for x in b2.binds]


def test_training_gangs_bare_pods_and_off_are_unchanged() -> None:
    nodes = [_node(f"n{i}") for i in range(4)]
    pods = [
        *(_pod(f"t{i}", 2, fleet="trainer", kind="training") for i in range(6)),
        *(_pod(f"bare{i}") for i in range(5)),  # serving without an owner: no fleet
        *(_pod(f"g{i}", 1, fleet="gangfleet", gang="g") for i in range(2)),  # serving gang members
    ]
    plain = BindingPlanner().plan(_obs(nodes, pods))
    spread = BindingPlanner(spread=SPREAD).plan(_obs(nodes, pods))
    assert spread == plain
    fleet = [_pod(f"web-{i}", fleet="web") for i in range(8)]
    assert BindingPlanner(spread=None).plan(_obs(nodes, fleet)) == BindingPlanner().plan(_obs(nodes, fleet))


def test_the_fleets_size_is_its_deployments_replicas_when_larger_and_fleets_are_per_namespace() -> None:
    nodes = [_node(f"n{i}") for i in range(4)]
    bound = [_pod("web-b0", fleet="web", node="n0")]
    new = _pod("web-new", fleet="web")
    # two pods of a fleet of 2: cap 1, n0 holds it -> elsewhere
    (b,) = BindingPlanner(spread=SPREAD).plan(_obs(nodes, [*bound, new])).binds
    assert b.node != "n0" and b.reason == REASON_SPREAD
    # the Deployment asks for 8: cap 2, n0 holds one -> the policy's node (n0, the packed one) stands
    dep = ObservedDeployment("ns", "web", replicas=8, ready_replicas=1, kind="serving")
    (b,) = BindingPlanner(spread=SPREAD).plan(_obs(nodes, [*bound, new], (dep,))).binds
    assert b.node == "n0" and b.reason == "placed"
    # the same Deployment name in another namespace is another fleet
    there = [_pod("web-b0", fleet="web", node="n0", ns="other")]
    (b,) = BindingPlanner(spread=SPREAD).plan(_obs(nodes, [*there, new])).binds
    assert b.node == "n0" and b.reason == "placed"


def test_serving_fleet_reads_the_deployment_off_the_replicaset_name() -> None:
    assert serving_fleet(_pod("a", fleet="web")) == "ns/Deployment/web"
    assert serving_fleet(_pod("a", fleet="db", owner_kind="StatefulSet")) == "ns/StatefulSet/db"
    assert serving_fleet(_pod("a")) == ""  # no owner
    assert serving_fleet(_pod("a", fleet="web", kind="training")) == ""


@settings(max_examples=150, deadline=None)
@given(
    free=st.lists(st.tuples(st.integers(0, 8), st.sampled_from(ORDER), st.integers(0, 4)), min_size=1, max_size=8),
    others=st.integers(0, 6),
    gpus=st.integers(1, 4),
    share=st.sampled_from([0.1, 0.25, 0.5]),
    policy=st.sampled_from(["gpufleet", "bestfit", "packing"]),
)
def test_property_binds_exactly_what_the_plain_binder_binds_where_it_fits(
    free: list[tuple[int, str, int]], others: int, gpus: int, share: float, policy: str
) -> None:
    """One pending replica on a random cluster (nodes part-used by other pods, some of the fleet's replicas on
    each): bound iff the plain binder binds it, on a node where it fits, in the same capacity type; on the plain
    node when that one is under the cap; else under the cap if the type has such a node with room."""
    nodes = [_node(f"n{i}", kind=k) for i, (_, k, _) in enumerate(free)]
    pods: list[ObservedPod] = []
    for i, (f, _, c) in enumerate(free):
        if f < 8:
            pods.append(_pod(f"fill{i}", 8 - f, node=f"n{i}", kind="training"))
        pods += [_pod(f"web-n{i}-{j}", 0, fleet="web", node=f"n{i}") for j in range(c)]  # replicas without GPUs
    pods += [_pod(f"web-p{j}", 0, fleet="web") for j in range(others)]  # more of the fleet, pending (decided later)
    new = _pod("web-a", gpus, fleet="web", created="2025-01-01T00:00:00Z")  # first in the order
    obs = _obs(nodes, [*pods, new])
    spread = ReplicaSpread(share)
    a = BindingPlanner(policy=policy, tier_order=ORDER, spread=spread).plan(obs, max_units=1)
    b = BindingPlanner(policy=policy, tier_order=ORDER).plan(obs, max_units=1)
    mine = [x for x in a.binds if x.pod == "ns/web-a"]
    plain = [x for x in b.binds if x.pod == "ns/web-a"]
    assert len(mine) == len(plain)
    if not plain:
        return
    (got,), (ref,) = mine, plain
    i, j = int(got.node[1:]), int(ref.node[1:])
    assert free[i][0] >= gpus and len(set(got.gpu_slots)) == gpus  # it fits there
    assert free[i][1] == free[j][1]  # the same capacity type
    crowd = Counter(p.node for p in obs.pods if p.node and p.kind == "serving")
    cap = spread.cap(len([p for p in obs.pods if p.kind == "serving"]))
    if crowd[ref.node] < cap:
        assert got == ref
    elif any(f >= gpus and k == free[j][1] and crowd[f"n{n}"] < cap for n, (f, k, _) in enumerate(free)):
        assert crowd[got.node] < cap and got.reason == REASON_SPREAD
    else:
        assert got == ref


def test_the_controller_takes_the_loops_spread_by_default() -> None:
    assert ControllerConfig().replica_spread == SPREAD  # the object ControlLoop.gpufleet sets, not a second default
    assert ControllerConfig(replica_spread=None).replica_spread is None
