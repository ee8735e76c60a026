"""The simulated world seen as a Kubernetes cluster: an :class:`~gpufleet.control.observation.Observation` of it.

A world adapter: it observes, it never decides. ``tests/unit/test_node_release_parity.py`` asks the Kubernetes
node release (:class:`~gpufleet.control.node_release.NodeReleasePlanner`) on it and compares what it would pass
the node scaler with what the simulator passes (``Provisioner.scale_down_idle``). What a cluster would show:

- a node (``node-<index>``, terminated ones are gone): its GPU product, its GPUs (also while starting: a
  Karpenter node's capacity is known from its instance type), Ready when up (a starting node and a failed one
  being repaired are NotReady, neither is cordoned), its capacity type from its pool's tier (``reserved``,
  ``on-demand``, ``spot``; a ``secondary`` (neocloud) pool's nodes are ``on-demand`` nodes of their own NodePool,
  launched and billed per use as in the simulator) and, for a launched tier, its pool as Karpenter NodePool;
- a NodePool per launched pool, pinned to its product and capacity type, ``spec.limits["nvidia.com/gpu"]`` its
  quota or provider ceiling (none: unbounded). Stock is not observable (a Kubernetes cluster sees no stock-out);
- a pod per simulated pod, pinned to its product (``gpu_models``): running ones bound to their node, queued ones
  pending, parked ones (waiting for their team's quota, not pending demand) pending with a scheduling gate (as
  Kueue holds a workload it has not admitted). A gang (a pod of more GPUs than a node holds, whole nodes) is
  ``GPUs / per node`` member pods of one node's GPUs each, ``gang_min`` all of them, bound one per node;
- the tiers a pod may use (spot only for checkpointable training) as gpufleet's fleet objects show them
  (``adapters/kubernetes/fleetobjects.py``): spot nodes and spot NodePools carry the taint
  ``gpufleet.io/spot=true:NoSchedule`` and the pods that may use spot (``PodTable.tiers``: checkpointable training)
  tolerate it and are annotated checkpointable; a starting node carries ``node.kubernetes.io/not-ready`` and a
  failed one ``node.kubernetes.io/unreachable`` (NoSchedule), as the node lifecycle taints them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.control.observation import (
    NodeSpec,
    Observation,
    ObservedNode,
    ObservedNodePool,
    ObservedPod,
    PodRequest,
)
from gpufleet.domain.pools import SPOT_NODE_TAINT, Tier
from gpufleet.sim.kinds import PARKED, QUEUED, RUNNING, SPOT_RANK
from gpufleet.sim.lifecycle import NodeState

if TYPE_CHECKING:
    from gpufleet.sim.world import World

NAMESPACE = "sim"
CAPACITY_TYPE = {
    Tier.RESERVED: "reserved",
    Tier.ON_DEMAND: "on-demand",
    Tier.SPOT: "spot",
    Tier.SECONDARY: "on-demand",  # a neocloud's nodes: launched per use, their own NodePool
}
_KEY, _VALUE, _EFFECT = SPOT_NODE_TAINT  # as gpufleet's fleet objects taint spot capacity
SPOT_TAINT = f"{_KEY}={_VALUE}:{_EFFECT}"
SPOT_TOLERATION = (_KEY, "Equal", _VALUE, _EFFECT)
CONDITION_TAINT: dict[int, str] = {
    NodeState.PROVISIONING: "node.kubernetes.io/not-ready=:NoSchedule",
    NodeState.DOWN: "node.kubernetes.io/unreachable=:NoSchedule",
}


def node_taints(tier: Tier, state: int) -> tuple[str, ...]:
    """A node's NoSchedule taints: the spot taint on a spot node, the node lifecycle's while it is not up."""
    spot = (SPOT_TAINT,) if tier is Tier.SPOT else ()
    return spot + ((CONDITION_TAINT[state],) if state in CONDITION_TAINT else ())


def node_name(node: int) -> str:
    return f"node-{node}"


def observe(world: World, now: int, *, gpus_while_starting: bool = True) -> Observation:
    """The world at ``now`` as a Kubernetes cluster would show it (module docstring). ``gpus_while_starting``
    False: a starting node shows no GPUs yet (its device plugin has not advertised them)."""
    f = world.fleet
    nodes: list[ObservedNode] = []
    for n in range(len(f.n_sku)):
        state = f.n_state[n]
        if state == NodeState.GONE:
            continue
        pr = f.pools[f.n_pool[n]]
        sku = f.sku_ids[pr.sku_idx]
        tier = pr.pool.tier
        gpus = f.n_total[n] if gpus_while_starting or state != NodeState.PROVISIONING else 0
        nodes.append(
            ObservedNode(
                NodeSpec(node_name(n), 0, 0, gpus, gpu_model=sku, taints=node_taints(tier, state)),
                sku=sku,
                capacity_type=CAPACITY_TYPE[tier],
                node_pool="" if tier is Tier.RESERVED else pr.pool.id,
                ready=state == NodeState.UP,
            )
        )
    pools = tuple(
        ObservedNodePool(
            pr.pool.id,
            pr.capacity_gpus,
            (f.sku_ids[pr.sku_idx],),
            (CAPACITY_TYPE[pr.pool.tier],),
            gpu=True,
            taints=(SPOT_TAINT,) if pr.pool.tier is Tier.SPOT else (),
        )
        for pr in f.pools
        if pr.pool.tier is not Tier.RESERVED
    )
    p = world.pods
    pods: list[ObservedPod] = []
    for q in range(len(p.state)):
        st = p.state[q]
        if st not in (RUNNING, QUEUED, PARKED):
            continue
        s = p.sku[q]
        per = f.gpus_per_node[s]
        g = p.gpus[q]
        sku = f.sku_ids[s]
        if g <= per:
            members = [(f"pod-{q}", g, "", 0)]
        else:
            k = g // per
            members = [(f"pod-{q}-{i}", per, f"pod-{q}", k) for i in range(k)]
        on = p.nodes[q] if st == RUNNING else ()
        spot = SPOT_RANK in p.tiers(q)
        for i, (name, gpus, gang, gang_min) in enumerate(members):
            pods.append(
                ObservedPod(
                    PodRequest(f"{NAMESPACE}/{name}", 0, 0, gpus, 1000, (sku,)),
                    NAMESPACE,
                    name,
                    name,
                    "Running" if st == RUNNING else "Pending",
                    node=node_name(on[i]) if on else "",
                    gang=gang,
                    gang_min=gang_min,
                    gated=st == PARKED,
                    checkpointable=spot,
                    tolerations=(SPOT_TOLERATION,) if spot else (),
                )
            )
    return Observation(float(now), tuple(nodes), tuple(pods), node_pools=pools)
