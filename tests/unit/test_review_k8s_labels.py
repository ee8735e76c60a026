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
    """Defect: labels.pod_request sums spec.containers only and ignores spec.initContainers. Kubernetes (kubelet
    admission, kube-scheduler) uses the effective request max(sum(containers), max(initContainers)) per resource.
    A pod whose init container checks all 8 GPUs (an NCCL/health check) and whose main container asks for 1 is
    read as a 1-GPU, 1 GiB pod: gpufleet binds it to a node with 1 free GPU and the kubelet refuses it
    (OutOfnvidia.com/gpu), or it over-commits the node's memory."""
    r = pod_request(_pod("8", "1"))
    assert r.num_gpu == 8, f"effective GPU request is 8 (the init container's), read {r.num_gpu}"
    assert r.memory_mib >= 64 * 1024, f"effective memory request is 64Gi, read {r.memory_mib} MiB"
