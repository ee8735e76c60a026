"""Applying the start buffer's top-up (control/buffer_pods.py): the placeholder PriorityClass and placeholder pods.

:func:`priority_class` is ``gpufleet-buffer`` (``scheduling.k8s.io/v1``, value -10, ``preemptionPolicy: Never``,
not the global default): below every pod of the default priority 0, so any real pod may preempt a placeholder
(gpufleet's binder through its preemption path, kube-scheduler by its own), and a placeholder preempts nothing.
:func:`placeholder` is one pod of that class holding a whole node's GPUs of a product: a pause container
(``image``, default ``registry.k8s.io/pause:3.9``) with ``nvidia.com/gpu`` requests and limits of the node's GPUs,
nodeSelector ``nvidia.com/gpu.product``, labels ``gpufleet.io/buffer=true`` and ``gpufleet.io/product``, the
controller's ``schedulerName``, grace 0 and no toleration (gpufleet's only taint is spot's, which the buffer of the
jobs that may not use spot must not use). A placeholder of the product's spot lane (``spot``: the start buffer's
spot lane, checkpointed training's) also selects ``karpenter.sh/capacity-type: spot``, tolerates the spot taint
(``gpufleet.io/spot=true:NoSchedule``, operator Equal), carries label ``gpufleet.io/buffer-lane=spot`` and is named
``gpufleet-buffer-spot-*``. Names are chosen here (10 random hex), not by the API server's ``generateName``: a
create retried after a lost answer then meets its own pod (409, outcome ``conflict``) instead of making a second
placeholder, which would hold (and have Karpenter launch) a whole GPU node more. :func:`apply_buffer_pods` creates the class if missing, then creates and deletes
placeholders; each write is an audit record (actions ``priority_class``, ``buffer_pod_create``, ``delete_pod``,
with the plan's reason).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.fleetobjects import SPOT_TAINT
from gpufleet.adapters.kubernetes.labels import L_BUFFER, L_CAPACITY, L_PRODUCT
from gpufleet.adapters.kubernetes.rest import JSON, ApiError
from gpufleet.control.buffer_pods import BufferPods

PRIORITY_CLASS = "gpufleet-buffer"
PRIORITY = -10
PAUSE_IMAGE = "registry.k8s.io/pause:3.9"
L_BUFFER_PRODUCT = "gpufleet.io/product"
L_BUFFER_LANE = "gpufleet.io/buffer-lane"  # "spot" on a spot-lane placeholder
SPOT_TOLERATION = {**SPOT_TAINT, "operator": "Equal"}  # tolerates the taint gpufleet's spot NodePools carry
PC_PATH = "/apis/scheduling.k8s.io/v1/priorityclasses"


def priority_class() -> JSON:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": PRIORITY_CLASS},
            "value": PRIORITY, "globalDefault": False, "preemptionPolicy": "Never",
            "description": "gpufleet start-buffer placeholders: hold a free GPU node; any real pod preempts them"}  # fmt: skip


def placeholder(
    product: str, gpus: int, namespace: str, scheduler: str, image: str = PAUSE_IMAGE, spot: bool = False
) -> JSON:
    """One placeholder pod holding ``gpus`` GPUs (a whole node) of ``product``, on a spot node if ``spot`` (module
    docstring)."""
    gpu = {"nvidia.com/gpu": str(gpus)}
    body: JSON = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"gpufleet-buffer-{secrets.token_hex(5)}", "namespace": namespace,
                     "labels": {L_BUFFER: "true", L_BUFFER_PRODUCT: product}},
        "spec": {"priorityClassName": PRIORITY_CLASS, "schedulerName": scheduler,
                 "nodeSelector": {L_PRODUCT: product}, "terminationGracePeriodSeconds": 0,
                 "automountServiceAccountToken": False,
                 "containers": [{"name": "pause", "image": image, "resources": {"requests": gpu, "limits": gpu}}]},
    }  # fmt: skip
    if spot:
        body["metadata"]["name"] = body["metadata"]["name"].replace("gpufleet-buffer-", "gpufleet-buffer-spot-", 1)
        body["metadata"]["labels"][L_BUFFER_LANE] = "spot"
        body["spec"]["nodeSelector"][L_CAPACITY] = "spot"
        body["spec"]["tolerations"] = [dict(SPOT_TOLERATION)]
    return body


def ensure_priority_class(act: Actuator) -> str:
    """Create the placeholders' PriorityClass unless it exists: ``exists``, ``created`` (or a dry run) or
    ``failed``."""
    if not act.dry_run:
        try:
            act.kube.get(f"{PC_PATH}/{PRIORITY_CLASS}")
            return "exists"
        except ApiError as exc:
            if exc.status != 404:
                return "failed"
    out = act.create(PC_PATH, priority_class(), "priority_class", PRIORITY_CLASS, "start_buffer_top_up")
    return "created" if out in ("applied", "dry_run", "conflict") else "failed"


def apply_buffer_pods(
    act: Actuator, plans: Sequence[BufferPods], namespace: str, scheduler: str, image: str = PAUSE_IMAGE
) -> list[tuple[str, str, str]]:
    """Delete, then create the placeholders of ``plans`` (the class first, if any is created). Returns
    (action, target, outcome) per write: ``delete`` with the pod, ``create`` with the lane (``BufferPods.lane``: the
    product, or its spot lane)."""
    done: list[tuple[str, str, str]] = []
    for plan in plans:
        for key in plan.delete:
            ns, name = key.split("/", 1)
            done.append(("delete", key, act.delete_pod(ns, name, plan.reason)))
    klass = ensure_priority_class(act) if any(p.create for p in plans) else "exists"
    if klass == "failed":
        return done + [("create", p.lane, "no_priority_class") for p in plans if p.create]
    wait_s = 10.0 if klass == "created" else 0.0  # admission may not see a class just created yet
    for plan in plans:
        for _ in range(plan.create):
            body = placeholder(plan.product, plan.per_node, namespace, scheduler, image, spot=plan.spot)
            out = act.create(f"/api/v1/namespaces/{namespace}/pods", body, "buffer_pod_create", plan.lane,
                             plan.reason, class_wait_s=wait_s, gpus=plan.per_node)  # fmt: skip
            done.append(("create", plan.lane, out))
    return done
