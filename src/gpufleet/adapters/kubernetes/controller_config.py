"""The controller's configuration (``gpufleet controller`` flags) and the parts of gpufleet's control loop it runs as
the simulator does (its node scaler, start buffer and replica spread): one place each is set."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.adapters.kubernetes.bufferpods import PAUSE_IMAGE
from gpufleet.adapters.kubernetes.fleetobjects import CHAIN
from gpufleet.adapters.kubernetes.health import DEFAULT_STALE_S
from gpufleet.adapters.kubernetes.node_limits import DEFAULT_SELECTOR as NODE_LIMITS_SELECTOR
from gpufleet.adapters.kubernetes.workloads import DEFAULT_QUEUE_QUERY, DEFAULT_RPS_QUERY, DEFAULT_RUNNING_QUERY
from gpufleet.control.placement import ReplicaSpread
from gpufleet.control.start_buffer import StartBuffer
from gpufleet.ports import NodeScaler


def loop_node_scaler() -> NodeScaler:
    """The node scaler of gpufleet's control loop (``ControlLoop.gpufleet(...).node_scaler``), the object the
    simulator scales nodes with: the one place it is set."""
    from gpufleet.control.loop import ControlLoop  # the whole loop's imports, only when the release is on

    return ControlLoop.gpufleet(0).node_scaler


def loop_start_buffer() -> StartBuffer | None:
    """The start buffer of gpufleet's control loop (``ControlLoop.gpufleet(...).start_buffer``), the object the
    simulator holds free nodes with: the one place it is set. The node release honours its hold half."""
    from gpufleet.control.loop import ControlLoop  # the whole loop's imports, only when the release is on

    return ControlLoop.gpufleet(0).start_buffer


def loop_replica_spread() -> ReplicaSpread | None:
    """The replica spread of gpufleet's control loop (``ControlLoop.gpufleet(...).replica_spread``), the object the
    simulator's scheduler runs: the one place it is set."""
    from gpufleet.control.loop import ControlLoop  # the whole loop's imports, only when a config is made

    return ControlLoop.gpufleet(0).replica_spread


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    scheduler_name: str = "gpufleet"
    policy: str = "gpufleet"
    tier_order: tuple[str, ...] = CHAIN  # capacity types in the loop's order of running capacity (fleetobjects)
    namespace: str = "kube-system"  # where the Lease lives
    lease_name: str = "gpufleet-controller"
    identity: str = ""
    lease_duration_s: int = 15
    renew_s: float = 2.0
    tick_s: float = 0.2
    bind_workers: int = 16
    plan_chunk: int = 256  # units decided before their binds are handed to the workers
    dry_run: bool = False
    events: bool = False
    audit_path: Path | None = None
    resync_s: float = 300.0
    consolidate_every_s: float = 0.0  # 0 = off; else plan + apply consolidation this often (leader only)
    max_moves_per_hour: int = 10
    checkpoint_timeout_s: float = 120.0
    # the termination grace of the pods consolidation and preemption evict (None: each pod's own
    # terminationGracePeriodSeconds, as kubectl drain and kube-scheduler's preemption leave it)
    eviction_grace_s: int | None = None
    health_port: int = 0  # 0 = off; else /healthz and /metrics on this port (adapters/kubernetes/health.py)
    health_stale_s: float = DEFAULT_STALE_S  # /healthz fails when the loop has not turned for this long
    store_url: str = ""  # with inventory_cluster: sync nodes and pods into the store every sync_every_s
    inventory_cluster: str = ""
    sync_every_s: float = 60.0
    # usage metering (adapters/kubernetes/usage.py): every meter_every_s (0 = off) the GPUs each workload holds,
    # written per hour into the store's utilization records through the usage sink, with DCGM utilization read
    # from prometheus_url (without it: not measured); needs store_url and inventory_cluster
    meter_every_s: float = 0.0
    # the DCGM series of this cluster in a Prometheus several clusters share: those whose dcgm_cluster_label is
    # dcgm_cluster ("": inventory_cluster), and those without the label (a Prometheus of one cluster); label "": off
    dcgm_cluster_label: str = "cluster"
    dcgm_cluster: str = ""
    sku_map: tuple[tuple[str, str], ...] = ()  # (GPU product, catalog SKU id): the sync's and the meter's mapping
    # every node_limits_every_s (0 = off) the GPU limits of the NodePools `gpufleet k8s quotas` emitted follow the
    # store's reservations and quotas for the cluster's region (adapters/kubernetes/node_limits.py)
    node_limits_every_s: float = 0.0
    node_limits_selector: str = NODE_LIMITS_SELECTOR  # which NodePools: those gpufleet emitted
    # replica scaling: every scale_every_s (0 = off) gpufleet's replica policy decides each opted-in Deployment
    # (annotations: adapters/kubernetes/deployment_json.py) from its request rate read from Prometheus at prometheus_url
    scale_every_s: float = 0.0
    # a scaling round's reads end by this many seconds (0: the round's period, scale_every_s or react_every_s): the
    # Deployments a slow Prometheus leaves unread keep their replicas, recorded skipped (round_deadline)
    scale_round_s: float = 0.0
    prometheus_url: str = ""
    rps_query: str = DEFAULT_RPS_QUERY
    # requests waiting and in service now (gauges; "" = not read): the policy's queue and in-flight signals; and
    # the requests whose queue wait passed the SLO over the last scale period (no default: the serving stack's
    # queue-time histogram needs a bucket at the SLO): the static floor's error budget
    queue_query: str = DEFAULT_QUEUE_QUERY
    running_query: str = DEFAULT_RUNNING_QUERY
    slo_miss_query: str = ""
    # a Deployment's policy first decided by this leader starts from this much of its request-rate history (0: from
    # nothing), replayed at the scale period: its forecaster, floors and windows as if it had decided all along
    scale_history_s: float = 86_400.0
    # between two scale periods, every react_every_s (0 = off) the policy's fast path sees the rate and the queue:
    # scale-up only, as the simulator's gateway asks it when the queue grows (ReplicaScaler.react)
    react_every_s: float = 15.0
    # before a scale-down, write controller.kubernetes.io/pod-deletion-cost on the Deployment's pods so that the
    # ReplicaSet controller stops the replicas gpufleet's scale-down rule would (control/replica_victims.py);
    # False: Kubernetes' own order (not ready first, then newest)
    cost_aware_scale_down: bool = True
    # priority preemption (control/preempting.py): a pod or gang the plan leaves unschedulable may evict strictly
    # lower-priority work (checkpoint handshake, then the Eviction API: the reclaim path), at most
    # max_preemptions_per_tick decisions a tick; preempt_grace_s and node_start_s price it as the loop does
    preemption: bool = True
    max_preemptions_per_tick: int = 4
    preempt_grace_s: int = 120
    node_start_s: int = 600
    # a serving pod prefers nodes holding fewer of its fleet's replicas (control/binding.py; None: off)
    replica_spread: ReplicaSpread | None = field(default_factory=loop_replica_spread)
    # node release: every release_every_s (0 = off) the loop's node scaler picks idle launched GPU nodes to
    # release (control/node_release.py; node_start_s prices a relaunch); each is cordoned, checked empty and deleted.
    # Karpenter must not empty them first: its launched NodePools' consolidateAfter Never (fleet spec release)
    release_every_s: float = 0.0
    # the start buffer's top-up, with the release (control/buffer_pods.py): placeholder pods of the PriorityClass
    # gpufleet-buffer (created if missing) in buffer_namespace ("": namespace) that Karpenter launches nodes for
    buffer_pods: bool = True
    buffer_namespace: str = ""
    buffer_image: str = PAUSE_IMAGE
