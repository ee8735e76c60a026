"""What a world reports to the loop: nodes, pods, deployments and gangs, in the schedule package's nouns.

A world (the Kubernetes adapter today) fills an :class:`Observation`; control/ decides from it and returns
decisions as data with reason codes; the world applies them. Node capacity is a :class:`NodeSpec` and a
pod's demand a :class:`PodRequest` (the scheduler's own types), plus what the world knows around them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpufleet.domain.workloads import ServingScaling
from gpufleet.schedule.table import NodeSpec, PodRequest

__all__ = [  # NodeSpec and PodRequest too: a world fills an observation with them (sim/observe.py)
    "DeclaredServing",
    "NodeSpec",
    "Observation",
    "ObservedDeployment",
    "ObservedNode",
    "ObservedNodePool",
    "ObservedPod",
    "ObservedWorkload",
    "PodRequest",
]


@dataclass(frozen=True, slots=True)
class ObservedNode:
    """One node. ``spec.labels`` / ``spec.taints`` carry every label (``k=v``) and NoSchedule taint."""

    spec: NodeSpec
    sku: str = ""  # GPU product (nvidia.com/gpu.product), "" for CPU nodes
    zone: str = ""
    region: str = ""
    instance_type: str = ""
    capacity_type: str = ""  # "on-demand" | "spot" | "reserved" | ""
    node_pool: str = ""
    mig: tuple[tuple[str, int], ...] = ()  # (profile, allocatable count), e.g. ("1g.10gb", 7)
    ready: bool = True
    unschedulable: bool = False
    created_s: float | None = None  # metadata.creationTimestamp in Unix seconds (None: unknown)
    # gpufleet's own cordon: the reason in the annotation gpufleet.io/cordoned-by of a cordoned node ("": not
    # cordoned, or cordoned by someone else, an administrator's kubectl cordon)
    cordoned_by: str = ""
    # when gpufleet's own cordon was placed (the annotation gpufleet.io/parked-at, Unix seconds; None: no own cordon,
    # or no readable time), and when gpufleet's node release saw the node's idle spell begin (gpufleet.io/idle-since):
    # what a restarted controller reads instead of its lost memory (control/node_release.py)
    parked_s: float | None = None
    idle_s: float | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def own_cordon(self) -> bool:
        """Cordoned by gpufleet (a consolidation's drain, a node release): the cordon gpufleet may undo."""
        return self.unschedulable and bool(self.cordoned_by)

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable


@dataclass(frozen=True, slots=True)
class ObservedPod:
    """One pod: its request in scheduler terms plus placement, ownership and policy labels."""

    request: PodRequest  # request.name is "namespace/name"
    namespace: str
    name: str
    uid: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    node: str = ""  # bound node ("" = not bound)
    gpu_slots: tuple[int, ...] = ()  # GPU slots gpufleet recorded at bind time (empty if unknown)
    scheduler_name: str = "default-scheduler"
    priority: int = 0
    team: str = ""
    tenant: str = ""
    feature: str = ""
    kind: str = ""  # serving | training | batch | ""
    checkpointable: bool = False
    gang: str = ""  # pod-group name ("" = not in a gang)
    gang_min: int = 0  # members that must start together
    owner_kind: str = ""
    owner_name: str = ""
    queue: str = ""  # Kueue LocalQueue name
    created: str = ""  # creationTimestamp (RFC 3339): scheduling order
    deleting: bool = False
    gated: bool = False  # spec.schedulingGates not empty: not to be scheduled yet
    annotations: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    ready: bool = False  # status.conditions Ready=True (a serving replica that answers requests)
    started_s: float | None = None  # status.startTime (else creationTimestamp) in Unix seconds; None: unknown
    preempts: bool = True  # False: spec.preemptionPolicy Never (its PriorityClass's), it waits instead of preempting
    buffer: bool = False  # a start-buffer placeholder (label gpufleet.io/buffer=true, control/buffer_pods.py)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def active(self) -> bool:
        """Holds (or will hold) resources: not finished and not being deleted."""
        return self.phase not in ("Succeeded", "Failed") and not self.deleting

    @property
    def latency_sensitive(self) -> bool:
        return self.kind == "serving"

    def tolerates(self, taint: str) -> bool:
        """Whether this pod accepts the node taint ``key=value:Effect`` (Kubernetes toleration rules)."""
        kv, _, effect = taint.rpartition(":")
        key, _, value = kv.partition("=")
        for t_key, op, t_value, t_effect in self.tolerations:
            if t_effect and t_effect != effect:
                continue
            if op == "Exists" and (not t_key or t_key == key):
                return True
            if op != "Exists" and t_key == key and t_value == value:
                return True
        return False

    def annotation(self, key: str, default: str = "") -> str:
        return dict(self.annotations).get(key, default)


@dataclass(frozen=True, slots=True)
class DeclaredServing:
    """What a serving Deployment declares for gpufleet's replica policy (its annotations: see
    adapters/kubernetes/labels.py): its scaling, the GPUs of one replica and their product (the replica's price),
    the latency SLO and per-replica concurrency if any, and the PromQL of its request rate, queued requests,
    requests in service and SLO misses over a period (``""``: the controller's). ``managed`` False
    (``gpufleet.io/managed: "false"``): declared, but left alone by gpufleet's replica scaling."""

    scaling: ServingScaling
    gpus_per_replica: int = 0
    gpu_product: str = ""
    slo_s: float | None = None
    max_concurrency: int | None = None
    rps_query: str = ""
    queue_query: str = ""
    running_query: str = ""
    slo_miss_query: str = ""
    managed: bool = True


@dataclass(frozen=True, slots=True)
class ObservedDeployment:
    namespace: str
    name: str
    replicas: int
    ready_replicas: int
    kind: str = ""  # gpufleet.io/kind label
    requests: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # (container, ((resource, quantity),))
    serving: DeclaredServing | None = None  # set when the Deployment opts in to replica scaling
    # the replicas of gpufleet's last scale write as recorded on the Deployment (gpufleet.io/scaled-replicas;
    # None: no record): what a leader without memory of its own writes compares the replicas with
    scaled_replicas: int | None = None


@dataclass(frozen=True, slots=True)
class ObservedWorkload:
    """A Kueue Workload: a gang as Kueue sees it (pod sets and counts), and whether it is admitted."""

    namespace: str
    name: str
    queue: str
    pod_sets: tuple[tuple[str, int], ...]
    admitted: bool


@dataclass(frozen=True, slots=True)
class ObservedNodePool:
    """A Karpenter NodePool (``karpenter.sh/v1``): what it may launch and its GPU limit.

    ``products`` / ``capacity_types``: the GPU products (``nvidia.com/gpu.product`` or
    ``karpenter.k8s.aws/instance-gpu-name`` values) and capacity types its template pins with labels or ``In``
    requirements, ``()`` = not pinned. ``gpu``: it shows it launches GPU nodes (pins a product, limits
    ``nvidia.com/gpu`` or requires an ``instance-gpu-*`` / ``nvidia.com/*`` label). ``taints``: its template's
    NoSchedule and NoExecute taints (``key=value:Effect``, as ``NodeSpec.taints``), which its nodes carry.
    ``startup_taints``: its template's ``startupTaints`` in the same form, which its nodes carry as they start until
    something (a DaemonSet such as a GPU operator's) removes them; pods need not tolerate them."""

    name: str
    gpu_limit: int | None  # spec.limits["nvidia.com/gpu"]; None = no GPU limit
    products: tuple[str, ...] = ()
    capacity_types: tuple[str, ...] = ()
    gpu: bool = False
    taints: tuple[str, ...] = ()  # spec.template.spec.taints
    startup_taints: tuple[str, ...] = ()  # spec.template.spec.startupTaints


@dataclass(frozen=True, slots=True)
class Observation:
    """A consistent-enough snapshot of one world at ``now_s`` (informer caches, not one transaction)."""

    now_s: float
    nodes: tuple[ObservedNode, ...]
    pods: tuple[ObservedPod, ...]
    deployments: tuple[ObservedDeployment, ...] = ()
    workloads: tuple[ObservedWorkload, ...] = ()
    node_pools: tuple[ObservedNodePool, ...] | None = None  # Karpenter NodePools; None = not observed (not served)
    resource_versions: dict[str, str] = field(default_factory=dict)


def rfc3339_s(raw: object) -> float | None:
    """An RFC 3339 timestamp as the API server writes it (``2026-12-02T16:00:00Z``; an offset, fractions, no zone
    read as UTC) in Unix seconds; None if absent or unreadable."""
    text = str(raw).strip() if raw else ""
    if not text:
        return None
    if text[-1] in "Zz":
        text = text[:-1] + "+00:00"
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (t if t.tzinfo is not None else t.replace(tzinfo=UTC)).timestamp()
