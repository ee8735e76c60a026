"""Test helpers: pod bodies from scheduler requests, a controller running in a thread, polling."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.schedule.table import PodRequest


def pod_body(
    name: str,
    req: PodRequest,
    scheduler: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    priority_class: str = "",
) -> dict[str, Any]:
    res: dict[str, str] = {"cpu": f"{req.cpu_milli}m", "memory": f"{req.memory_mib}Mi"}
    ann = dict(annotations or {})
    limits: dict[str, str] = {}
    if req.num_gpu and req.gpu_milli == 1000:
        res["nvidia.com/gpu"] = str(req.num_gpu)
        limits["nvidia.com/gpu"] = str(req.num_gpu)
    elif req.num_gpu:
        ann["gpufleet.io/gpu-milli"] = str(req.gpu_milli)
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": res, "limits": limits}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": ann},
        "spec": spec,
    }


def create_pod(kube: Kube, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return kube.post(f"/api/v1/namespaces/{ns}/pods", body)


def pods_in(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return list(kube.get(f"/api/v1/namespaces/{ns}/pods").get("items", []))


def wait_for(cond: Callable[[], bool], timeout_s: float = 30.0, every_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every_s)
    return cond()


@contextmanager
def running_controller(kube: Kube, cfg: ControllerConfig) -> Iterator[Controller]:
    ctl = Controller(kube, cfg).start()
    t = threading.Thread(target=ctl.run, daemon=True)
    t.start()
    try:
        yield ctl
    finally:
        ctl.stop()
        t.join(timeout=30)
