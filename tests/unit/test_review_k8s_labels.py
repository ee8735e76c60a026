"""Review: the scheduler's request read from a Pod must be what the kubelet admits it against."""

from __future__ import annotations

from gpufleet.adapters.kubernetes.labels import pod_request


def _pod(init_gpus: str, main_gpus: str) -> dict[str, object]:
    def c(name: str, gpus: str, mem: str) -> dict[str, object]:
        r = {"cpu": "1", "memory": mem, "nvidia.com/gpu": gpus}
        return {"name": name, "image": "x", "resources": {"requests": r, "limits": {"nvidia.com/gpu": gpus}}}

    return {
        "metadata": {"namespace": "ml", "name": "train-0"},
        "spec": {"initContainers": [c("nccl-check", init_gpus, "64Gi")], "containers": [c("main", main_gpus, "1Gi")]},
    }


def test_init_container_requests_count_toward_the_pods_effective_request() -> None:
    """Review (fixed), the defect: labels.pod_request sums spec.containers only and ignores spec.initContainers.
    Kubernetes (kubelet admission, kube-scheduler) uses the effective request max(sum(containers), max(initContainers))
    per resource. A pod whose init container checks all 8 GPUs (an NCCL/health check) and whose main container asks for
    1 is read as a 1-GPU, 1 GiB pod: gpufleet binds it to a node with 1 free GPU and the kubelet refuses it
    (OutOfnvidia.com/gpu), or it over-commits the node's memory."""
    r = pod_request(_pod("8", "1"))
    assert r.num_gpu == 8, f"effective GPU request is 8 (the init container's), read {r.num_gpu}"
    assert r.memory_mib >= 64 * 1024, f"effective memory request is 64Gi, read {r.memory_mib} MiB"


def test_sidecar_init_containers_and_overhead_add_to_the_request() -> None:
    """Kubernetes' rule: a sidecar (init container with restartPolicy Always) runs beside everything after it."""
    pod = _pod("2", "1")
    spec = pod["spec"]
    assert isinstance(spec, dict)
    sidecar = {"name": "proxy", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}
    spec["initContainers"] = [sidecar, *spec["initContainers"]]
    spec["overhead"] = {"cpu": "250m", "memory": "128Mi"}
    r = pod_request(pod)
    assert r.num_gpu == 2  # the init container's 2 GPUs (it runs beside the sidecar, before the main's 1)
    assert r.cpu_milli == 1000 + 500 + 250  # max(main 1000 + sidecar 500, init 1000 + sidecar 500) + overhead
    assert r.memory_mib == 64 * 1024 + 128
