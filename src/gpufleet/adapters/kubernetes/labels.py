"""Kubernetes objects (JSON) -> the loop's observation types. The label conventions live here.

Nodes (well-known labels set by the GPU operator's feature discovery, Karpenter and the cloud provider):

=====================================  ==========================================================
``status.allocatable``                 ``cpu`` -> cpu_milli, ``memory`` -> memory_mib,
                                       ``nvidia.com/gpu`` -> gpu_count, ``nvidia.com/mig-<p>`` -> mig
``nvidia.com/gpu.product``             sku and NodeSpec.gpu_model (e.g. ``NVIDIA-H100-80GB-HBM3``)
``karpenter.k8s.aws/instance-gpu-name`` sku fallback (e.g. ``h100``)
``cloud.google.com/gke-accelerator``    sku fallback on GKE, whose nodes carry no feature discovery labels by
                                       default (e.g. ``nvidia-h100-80gb``)
``topology.kubernetes.io/zone``        zone (and ``.../region`` -> region)
``node.kubernetes.io/instance-type``   instance_type; the last sku fallback when it is a GPU instance type of AWS,
                                       GCP or Azure that gpufleet maps (``p5.48xlarge``, ``a3-highgpu-8g``,
                                       ``Standard_ND96isr_H100_v5``: AKS nodes without feature discovery)
``karpenter.sh/capacity-type``         capacity_type (``on-demand``/``spot``/``reserved``); fallbacks
                                       ``eks.amazonaws.com/capacityType`` (ON_DEMAND/SPOT),
                                       ``cloud.google.com/gke-spot=true``,
                                       ``cloud.google.com/gke-preemptible=true`` and
                                       ``kubernetes.azure.com/scalesetpriority=spot`` (spot)
``karpenter.sh/nodepool``              node_pool
``topology.gpufleet.io/rack``          NodeSpec.rack (any string; numbered in first-seen order)
``nvidia.com/gpu.clique`` or           NodeSpec.nvlink_domain (numbered likewise)
``topology.gpufleet.io/nvlink-domain``
``spec.unschedulable`` / Ready         unschedulable / ready
``gpufleet.io/cordoned-by`` annotation cordoned_by (only while ``spec.unschedulable``: gpufleet's own cordon)
``gpufleet.io/parked-at`` annotation   parked_s (RFC 3339; only with gpufleet's own cordon: when it was placed)
``gpufleet.io/idle-since`` annotation  idle_s (RFC 3339; written by the node release: when it saw the node go idle)
=====================================  ==========================================================

Pods: the request the kubelet admits a pod against (the containers' sum, or an init container's own when larger,
sidecar init containers added, plus ``spec.overhead``). A node's ``nvidia.com/gpu`` above :data:`MAX_NODE_GPUS` is a
bad object, and so is a pod asking more (one node holds a pod: it could run nowhere; the API server stores
``nvidia.com/gpu: 1E40``), and a node or pod whose CPU (millicores) or memory (MiB) passes :data:`MAX_CPU_OR_MEMORY`
(the scheduler's int64 columns; the API server stores ``cpu: 1e30``). ``nvidia.com/gpu: N`` -> ``num_gpu=N, gpu_milli=1000``; a GPU
share is the annotation ``gpufleet.io/gpu-milli: "1".."999"`` with no ``nvidia.com/gpu`` request (one GPU,
that many thousandths). Labels ``gpufleet.io/team`` (default: the namespace), ``gpufleet.io/tenant``,
``gpufleet.io/feature``, ``gpufleet.io/kind`` (serving/training/batch; serving is latency-sensitive, never
moved); annotation ``gpufleet.io/checkpointable: "true"``. For priority preemption (control/preempting.py):
``spec.priority``, ``spec.preemptionPolicy`` (``Never``: the pod never preempts), ``status.startTime`` (else
``creationTimestamp``) and the annotations ``gpufleet.io/last-checkpoint-s`` (Unix time of the last checkpoint,
written by the trainer), ``gpufleet.io/min-runtime-s`` and ``gpufleet.io/restart-s``. Label ``gpufleet.io/buffer: "true"``: a
start-buffer placeholder (control/buffer_pods.py). Gangs: label ``gpufleet.io/pod-group: NAME`` and
annotation ``gpufleet.io/pod-group-min: N`` (Kueue's ``kueue.x-k8s.io/pod-group-name`` label with the
``kueue.x-k8s.io/pod-group-total-count`` annotation, and the coscheduling label ``scheduling.x-k8s.io/pod-group``,
are read too). A pod with ``spec.schedulingGates`` (e.g. Kueue's admission gate) is not scheduled. At bind time gpufleet records the GPU slots it chose in the
annotation ``gpufleet.io/gpu-slots: "0,1"`` (the Binding carries it; the API server copies it to the pod).
Annotation ``gpufleet.io/workload-id``: the id the usage meter writes the pod's GPUs under (adapters/kubernetes/usage.py;
default ``namespace:owner``), e.g. a workload registered in the service.

Deployments: ``adapters/kubernetes/deployment_json.py`` (the replica policy's annotations, gpufleet's scale record).
Karpenter NodePools (``karpenter.sh/v1``, :class:`ObservedNodePool`): ``spec.limits["nvidia.com/gpu"]`` (the GPUs
its nodes may hold; absent = no limit) and, from ``spec.template`` (``metadata.labels`` and ``spec.requirements``
with operator ``In``), the GPU products (``nvidia.com/gpu.product`` or ``karpenter.k8s.aws/instance-gpu-name``)
and capacity types (``karpenter.sh/capacity-type``) it is pinned to; a requirement on ``karpenter.k8s.aws/
instance-gpu-*`` or ``nvidia.com/*`` (other than ``DoesNotExist``) marks it a GPU NodePool; the template's
``spec.taints`` and ``spec.startupTaints`` with effect NoSchedule or NoExecute are kept as a node's are
(``key=value:Effect``).
A pod's ``Ready`` condition is read (a serving replica that answers), and of the annotations outside
``gpufleet.io/`` only ``controller.kubernetes.io/pod-deletion-cost`` (written by gpufleet before a scale-down).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gpufleet.adapters.aws.skus import INSTANCE_TYPES
from gpufleet.adapters.azure.vm_sizes import VM_SIZES
from gpufleet.adapters.gcp.machines import MACHINE_TYPES
from gpufleet.control.observation import (
    ObservedNode,
    ObservedNodePool,
    ObservedPod,
    ObservedWorkload,
    rfc3339_s,
)
from gpufleet.control.replica_victims import DELETION_COST
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import NodeSpec, PodRequest

GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
UNREADABLE_SCHEDULER = "gpufleet.io/unreadable"  # pod_footprint: a pod held, never scheduled or moved by gpufleet
UNREADABLE_PRIORITY = 2_000_000_000  # system-cluster-critical's: above every preemptor and the drain's gate
MAX_NODE_GPUS = 1024  # nvidia.com/gpu of one node: 8-16 GPUs, MIG "single" or time-sliced shares a few hundred
MAX_REPLICAS = 2**31 - 1  # a Deployment's spec.replicas is an int32
MAX_CPU_OR_MEMORY = 2**40  # CPU millicores (1.1e9 cores) or memory MiB (1 EiB) of one node or pod: beyond, a bad object
L_PRODUCT = "nvidia.com/gpu.product"
L_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
L_ZONE = "topology.kubernetes.io/zone"
L_REGION = "topology.kubernetes.io/region"
L_INSTANCE = "node.kubernetes.io/instance-type"
L_CAPACITY = "karpenter.sh/capacity-type"
L_EKS_CAPACITY = "eks.amazonaws.com/capacityType"
L_GKE_SPOT = "cloud.google.com/gke-spot"
L_GKE_PREEMPTIBLE = "cloud.google.com/gke-preemptible"
L_GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
L_AKS_PRIORITY = "kubernetes.azure.com/scalesetpriority"
#: a cloud's GPU instance type -> a product name the catalog's token rule maps to its SKU (``nvidia-h100-80gb``)
INSTANCE_PRODUCTS: dict[str, str] = {
    t.name: "nvidia-" + sku.replace("_", "-")
    for table in (INSTANCE_TYPES, MACHINE_TYPES, VM_SIZES)
    for sku, t in table.items()
}
L_NODEPOOL = "karpenter.sh/nodepool"
L_RACK = "topology.gpufleet.io/rack"
L_CLIQUE = "nvidia.com/gpu.clique"
L_NVLINK = "topology.gpufleet.io/nvlink-domain"
L_TEAM = "gpufleet.io/team"
L_TENANT = "gpufleet.io/tenant"
L_FEATURE = "gpufleet.io/feature"
L_KIND = "gpufleet.io/kind"
L_BUFFER = "gpufleet.io/buffer"  # "true": a start-buffer placeholder pod (control/buffer_pods.py)
L_GANG = "gpufleet.io/pod-group"
L_QUEUE = "kueue.x-k8s.io/queue-name"
L_KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"  # Kueue plain-pod groups
A_KUEUE_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
L_COSCHED_GROUP = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins coscheduling
A_GANG_MIN = "gpufleet.io/pod-group-min"
A_GPU_MILLI = "gpufleet.io/gpu-milli"
A_GPU_SLOTS = "gpufleet.io/gpu-slots"
A_CORDONED_BY = "gpufleet.io/cordoned-by"  # on a node gpufleet cordoned itself (the reason): the cordon it may undo
A_PARKED_AT = "gpufleet.io/parked-at"  # beside cordoned-by: when gpufleet cordoned the node (RFC 3339, UTC)
A_IDLE_SINCE = "gpufleet.io/idle-since"  # on an idle launched GPU node: when the node release saw it go idle
A_WORKLOAD_ID = "gpufleet.io/workload-id"  # the usage meter's workload id (a workload registered in the service)
# observed besides gpufleet.io/*: the pod-deletion-cost gpufleet writes before a scale-down (Kubernetes' ReplicaSet
# controller deletes the lowest first; beta, on by default, since 1.22: an API server of 1.20 stores it only)
KEPT_ANNOTATIONS = frozenset({DELETION_COST})
A_CHECKPOINTABLE = "gpufleet.io/checkpointable"
_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3, "M": 10**6, "G": 10**9,
    "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip


def parse_quantity(raw: object, where: str) -> Decimal:
    """A Kubernetes quantity (``500m``, ``16Gi``, ``2``, ``1e3``) as a Decimal; clear error otherwise."""
    s = str(raw).strip()
    for suf in sorted(_SUFFIX, key=len, reverse=True):
        if s.endswith(suf) and s[: -len(suf)]:
            try:
                return Decimal(s[: -len(suf)]) * Decimal(str(_SUFFIX[suf]))
            except ArithmeticError:
                break
    try:
        return Decimal(s)
    except ArithmeticError:
        raise ValidationError(where, f"not a Kubernetes quantity: {s!r}") from None


def _bounded(value: int, where: str, most: int, unit: str) -> int:
    if value > most:
        raise ValidationError(where, f"at most {most} {unit}, got {value:.3g}")
    return value


def _milli(raw: object, where: str) -> int:
    value = int((parse_quantity(raw, where) * 1000).to_integral_value(rounding="ROUND_CEILING"))
    return _bounded(value, where, MAX_CPU_OR_MEMORY, "millicores")


def _mib(raw: object, where: str) -> int:
    value = int((parse_quantity(raw, where) / 2**20).to_integral_value(rounding="ROUND_CEILING"))
    return _bounded(value, where, MAX_CPU_OR_MEMORY, "MiB")


def _gpus(raw: object, where: str) -> int:
    """A pod's GPU count: at most :data:`MAX_NODE_GPUS`, the most one node holds (a pod runs on one node)."""
    return _bounded(int(parse_quantity(raw, where)), where, MAX_NODE_GPUS, "GPUs (the most one node holds)")


class TopologyIds:
    """Stable small ints for rack / NVLink-domain label values (first seen, first numbered)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def of(self, value: str) -> int:
        if not value:
            return 0
        return self._ids.setdefault(value, len(self._ids) + 1)


def capacity_type(labels: dict[str, str]) -> str:
    if L_CAPACITY in labels:
        return labels[L_CAPACITY]
    eks = labels.get(L_EKS_CAPACITY, "")
    if eks:
        return {"ON_DEMAND": "on-demand", "SPOT": "spot", "CAPACITY_BLOCK": "reserved"}.get(eks, eks.lower())
    if labels.get(L_GKE_SPOT) == "true" or labels.get(L_GKE_PREEMPTIBLE) == "true":
        return "spot"
    if labels.get(L_AKS_PRIORITY) == "spot":
        return "spot"
    return ""


def scheduling_taints(raw: list[dict[str, Any]] | None) -> tuple[str, ...]:
    """The taints that keep pods off a node (effect NoSchedule or NoExecute) as ``key=value:Effect`` strings."""
    return tuple(
        f"{t.get('key', '')}={t.get('value', '')}:{t.get('effect', '')}"
        for t in raw or []
        if t.get("effect") in ("NoSchedule", "NoExecute")
    )


def node_from_json(obj: dict[str, Any], topo: TopologyIds) -> ObservedNode:
    meta = obj.get("metadata", {})
    name = str(meta.get("name", ""))
    labels: dict[str, str] = meta.get("labels") or {}
    status = obj.get("status", {})
    alloc: dict[str, Any] = status.get("allocatable") or status.get("capacity") or {}
    where = f"node[{name}].status.allocatable"
    gpus = int(parse_quantity(alloc.get(GPU, 0), f"{where}.{GPU}"))
    if not 0 <= gpus <= MAX_NODE_GPUS:  # a broken device plugin's count would size every GPU matrix by it
        raise ValidationError(f"{where}.{GPU}", f"must be 0..{MAX_NODE_GPUS} (shared GPUs included), got {gpus}")
    mig = tuple(
        sorted(
            (k.removeprefix(MIG_PREFIX), int(parse_quantity(v, f"{where}.{k}")))
            for k, v in alloc.items()
            if k.startswith(MIG_PREFIX)
        )
    )
    sku = (
        labels.get(L_PRODUCT)
        or labels.get(L_GPU_NAME)
        or labels.get(L_GKE_ACCELERATOR)
        or INSTANCE_PRODUCTS.get(labels.get(L_INSTANCE, ""), "")
    )
    taints = scheduling_taints(obj.get("spec", {}).get("taints"))
    conds = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
    unschedulable = bool(obj.get("spec", {}).get("unschedulable", False))
    annotations: dict[str, Any] = meta.get("annotations") or {}
    cordoned_by = str(annotations.get(A_CORDONED_BY) or "") if unschedulable else ""
    spec = NodeSpec(
        name=name,
        cpu_milli=_milli(alloc.get("cpu", 0), f"{where}.cpu"),
        memory_mib=_mib(alloc.get("memory", 0), f"{where}.memory") if "memory" in alloc else 0,
        gpu_count=gpus,
        gpu_model=sku if gpus else "",
        rack=topo.of(labels.get(L_RACK, "")),
        nvlink_domain=topo.of("nv:" + (labels.get(L_CLIQUE) or labels.get(L_NVLINK, "")))
        if (labels.get(L_CLIQUE) or labels.get(L_NVLINK))
        else 0,
        labels=tuple(sorted(f"{k}={v}" for k, v in labels.items())),
        taints=taints,
    )
    return ObservedNode(
        spec=spec,
        sku=sku,
        zone=labels.get(L_ZONE, ""),
        region=labels.get(L_REGION, ""),
        instance_type=labels.get(L_INSTANCE, ""),
        capacity_type=capacity_type(labels),
        node_pool=labels.get(L_NODEPOOL, ""),
        mig=mig,
        ready=ready,
        unschedulable=unschedulable,
        created_s=rfc3339_s(meta.get("creationTimestamp")),
        cordoned_by=cordoned_by,
        parked_s=rfc3339_s(annotations.get(A_PARKED_AT)) if cordoned_by else None,
        idle_s=rfc3339_s(annotations.get(A_IDLE_SINCE)),
    )


def pod_request(obj: dict[str, Any]) -> PodRequest:
    """The scheduler's request for a pod (see the module docstring for the GPU-share annotation)."""
    meta = obj.get("metadata", {})
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    ann: dict[str, str] = meta.get("annotations") or {}
    cpu, mem, gpus = _effective_request(obj.get("spec", {}), f"pod[{key}].spec")
    milli = 1000 if gpus else 0
    if A_GPU_MILLI in ann:
        try:
            share = int(ann[A_GPU_MILLI])
        except ValueError:
            raise ValidationError(
                f"pod[{key}].metadata.annotations.{A_GPU_MILLI}", "must be an integer 1..1000"
            ) from None
        if gpus > 1 or not 1 <= share <= 1000:
            raise ValidationError(f"pod[{key}].metadata.annotations.{A_GPU_MILLI}", "1..1000 and at most one GPU")
        gpus, milli = 1, share
    selector: dict[str, str] = obj.get("spec", {}).get("nodeSelector") or {}
    r = PodRequest(
        name=key,
        cpu_milli=cpu,
        memory_mib=mem,
        num_gpu=gpus,
        gpu_milli=milli,
        node_selector=tuple(sorted(f"{k}={v}" for k, v in selector.items())),
    )
    r.validate()
    return r


def _container_request(c: dict[str, Any], where: str) -> tuple[int, int, int]:
    req: dict[str, Any] = (c.get("resources") or {}).get("requests") or {}
    lim: dict[str, Any] = (c.get("resources") or {}).get("limits") or {}
    where = f"{where}.resources.requests"
    return (
        _milli(req.get("cpu", 0), f"{where}.cpu"),
        _mib(req.get("memory", 0), f"{where}.memory"),
        _gpus(req.get(GPU, lim.get(GPU, 0)), f"{where}.{GPU}"),
    )


def _effective_request(spec: dict[str, Any], where: str) -> tuple[int, int, int]:
    """CPU millicores, memory MiB and GPUs the kubelet admits the pod against (Kubernetes' rule, per resource):
    the larger of the containers' sum and each init container's own request, sidecar init containers
    (``restartPolicy: Always``) adding to both, plus the pod's ``overhead``."""

    def add(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
        return (a[0] + b[0], a[1] + b[1], a[2] + b[2])

    total = (0, 0, 0)
    for i, c in enumerate(spec.get("containers") or []):
        total = add(total, _container_request(c, f"{where}.containers[{i}]"))
    sidecars, peak = (0, 0, 0), (0, 0, 0)
    for i, c in enumerate(spec.get("initContainers") or []):
        own = _container_request(c, f"{where}.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":  # a sidecar: runs on beside the later ones and the containers
            sidecars = add(sidecars, own)
            during = sidecars
        else:
            during = add(own, sidecars)
        peak = (max(peak[0], during[0]), max(peak[1], during[1]), max(peak[2], during[2]))
    total = add(total, sidecars)
    total = (max(total[0], peak[0]), max(total[1], peak[1]), max(total[2], peak[2]))
    overhead: dict[str, Any] = spec.get("overhead") or {}
    total = add(
        total,
        (
            _milli(overhead.get("cpu", 0), f"{where}.overhead.cpu"),
            _mib(overhead.get("memory", 0), f"{where}.overhead.memory"),
            0,
        ),
    )
    most = {"cpu": MAX_CPU_OR_MEMORY, "memory": MAX_CPU_OR_MEMORY, GPU: MAX_NODE_GPUS}
    for value, (field, bound) in zip(total, most.items(), strict=True):
        _bounded(value, f"{where}.containers[*].resources.requests.{field}", bound, "in all (the pod's sum)")
    return total


def pod_from_json(obj: dict[str, Any]) -> ObservedPod:
    meta = obj.get("metadata", {})
    labels: dict[str, str] = meta.get("labels") or {}
    ann: dict[str, str] = meta.get("annotations") or {}
    spec = obj.get("spec", {})
    status = obj.get("status") or {}
    ns = str(meta.get("namespace", ""))
    slots: tuple[int, ...] = ()
    if ann.get(A_GPU_SLOTS):
        try:
            slots = tuple(int(x) for x in ann[A_GPU_SLOTS].split(","))
        except ValueError:
            slots = ()
    owners = meta.get("ownerReferences") or [{}]
    gang = labels.get(L_GANG) or labels.get(L_KUEUE_GROUP) or labels.get(L_COSCHED_GROUP, "")
    try:
        gang_min = int(ann.get(A_GANG_MIN) or ann.get(A_KUEUE_GROUP_COUNT) or "0")
    except ValueError:
        raise ValidationError(
            f"pod[{ns}/{meta.get('name')}].metadata.annotations.{A_GANG_MIN}", "must be an integer"
        ) from None
    return ObservedPod(
        request=pod_request(obj),
        namespace=ns,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        phase=str(status.get("phase", "Pending")),
        node=str(spec.get("nodeName") or ""),
        gpu_slots=slots,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        priority=int(spec.get("priority") or 0),
        team=labels.get(L_TEAM, ns),
        tenant=labels.get(L_TENANT, ""),
        feature=labels.get(L_FEATURE, ""),
        kind=labels.get(L_KIND, ""),
        checkpointable=ann.get(A_CHECKPOINTABLE, "") == "true",
        gang=gang,
        gang_min=gang_min,
        owner_kind=str(owners[0].get("kind", "")),
        owner_name=str(owners[0].get("name", "")),
        queue=labels.get(L_QUEUE, ""),
        created=str(meta.get("creationTimestamp", "")),
        deleting=bool(meta.get("deletionTimestamp")),
        gated=bool(spec.get("schedulingGates")),
        annotations=tuple(
            sorted((k, v) for k, v in ann.items() if k.startswith("gpufleet.io/") or k in KEPT_ANNOTATIONS)
        ),
        tolerations=tuple(
            (str(t.get("key", "")), str(t.get("operator", "Equal")), str(t.get("value", "")), str(t.get("effect", "")))
            for t in spec.get("tolerations") or []
        ),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []),
        started_s=rfc3339_s(status.get("startTime")) or rfc3339_s(meta.get("creationTimestamp")),
        preempts=spec.get("preemptionPolicy") != "Never",
        buffer=labels.get(L_BUFFER) == "true",
    )


def pod_footprint(obj: dict[str, Any]) -> ObservedPod | None:
    """What a bound, unfinished pod holds when :func:`pod_from_json` refuses it (a bad annotation): its request (a bad
    GPU-share annotation read as whole GPUs), on its node, with a priority no preemption or drain goes past and no
    scheduler of gpufleet's, so it is held and never decided on. None when it holds nothing or its requests
    themselves cannot be read."""
    meta = obj.get("metadata", {})
    spec = obj.get("spec", {})
    phase = str((obj.get("status") or {}).get("phase", "Pending"))
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        return None
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    try:
        request = pod_request(obj)
    except ValidationError:
        try:
            cpu, mem, gpus = _effective_request(spec, f"pod[{key}].spec")
        except ValidationError:
            return None
        request = PodRequest(name=key, cpu_milli=cpu, memory_mib=mem, num_gpu=gpus, gpu_milli=1000 if gpus else 0)
    return ObservedPod(
        request=request,
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        phase=phase,
        node=str(spec["nodeName"]),
        scheduler_name=UNREADABLE_SCHEDULER,
        priority=UNREADABLE_PRIORITY,
        created=str(meta.get("creationTimestamp", "")),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def workload_from_json(obj: dict[str, Any]) -> ObservedWorkload:
    meta = obj.get("metadata", {})
    spec = obj.get("spec", {})
    conds = obj.get("status", {}).get("conditions") or []
    return ObservedWorkload(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        queue=str(spec.get("queueName", "")),
        pod_sets=tuple((str(p.get("name", "")), int(p.get("count", 0))) for p in spec.get("podSets") or []),
        admitted=any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conds),
    )


def _pinned(labels: dict[str, str], reqs: list[dict[str, Any]], keys: tuple[str, ...]) -> tuple[str, ...]:
    vals = {labels[k] for k in keys if labels.get(k)}
    for r in reqs:
        if r.get("key") in keys and r.get("operator") == "In":
            vals.update(str(v) for v in r.get("values") or [])
    return tuple(sorted(vals))


def node_pool_from_json(obj: dict[str, Any]) -> ObservedNodePool:
    """A Karpenter v1 NodePool (see the module docstring)."""
    meta = obj.get("metadata", {})
    name = str(meta.get("name", ""))
    spec = obj.get("spec") or {}
    limits: dict[str, Any] = spec.get("limits") or {}
    tmpl = spec.get("template") or {}
    labels: dict[str, str] = (tmpl.get("metadata") or {}).get("labels") or {}
    tspec: dict[str, Any] = tmpl.get("spec") or {}
    reqs: list[dict[str, Any]] = tspec.get("requirements") or []
    limit = int(parse_quantity(limits[GPU], f"nodepool[{name}].spec.limits.{GPU}")) if GPU in limits else None
    products = _pinned(labels, reqs, (L_PRODUCT, L_GPU_NAME))
    gpu_req = any(
        str(r.get("key", "")).startswith(("karpenter.k8s.aws/instance-gpu", "nvidia.com/"))
        and r.get("operator") != "DoesNotExist"
        for r in reqs
    )
    return ObservedNodePool(
        name=name,
        gpu_limit=limit,
        products=products,
        capacity_types=_pinned(labels, reqs, (L_CAPACITY,)),
        gpu=bool(products) or limit is not None or gpu_req,
        taints=scheduling_taints(tspec.get("taints")),
        startup_taints=scheduling_taints(tspec.get("startupTaints")),
    )
