"""Review (k8snodes): which GPU product a pending Kubernetes pod holds nodes of, as the node release
(control/node_release.py) reads a pod the adapter (adapters/kubernetes/labels.py ``pod_from_json``) observed."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.kubernetes.labels import pod_from_json
from gpufleet.control.buffer_reading import late_starts
from gpufleet.control.loop import ControlLoop
from gpufleet.control.node_release import NodeReleasePlanner
from gpufleet.control.observation import Observation, ObservedPod
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from tests.unit.test_node_release import H100, T0, Recorder, node, stamp

A100 = "NVIDIA-A100-SXM4-80GB"


def _pinned(name: str, product: str, created: float = -3600.0) -> ObservedPod:
    """A pending 8-GPU training pod pinned to ``product`` the way Kubernetes users pin one: a nodeSelector on
    ``nvidia.com/gpu.product`` (the adapter reads no other GPU model field)."""
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "creationTimestamp": stamp(created),
                     "labels": {"gpufleet.io/kind": "training"}},
        "spec": {"schedulerName": "gpufleet", "nodeSelector": {"nvidia.com/gpu.product": product},
                 "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip
    return pod_from_json(body)


def test_a_pending_pod_pinned_to_another_product_does_not_hold_idle_nodes() -> None:
    """Review (fixed), the defect: the planner keeps a product's idle nodes for the pending pods that may run on it
    (``_may_run``), read from ``request.gpu_models`` only; the Kubernetes adapter never sets it (a pod pins its GPU
    product with a nodeSelector on ``nvidia.com/gpu.product``, read into ``request.node_selector``), so every
    pending GPU pod counted as pending work of every product. One A100 job that cannot start (no A100 capacity, a
    quota) held every idle on-demand H100 node of the cluster (``needed_by_pending_work``) for as long as it waited.
    The gang reach already reads the pin (``pod_products``)."""
    pending = _pinned("a100-job", A100)
    assert pending.request.gpu_models == () and f"nvidia.com/gpu.product={A100}" in pending.request.node_selector
    rec = Recorder()
    NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG).plan(Observation(T0, (node("idle"),), (pending,)))
    assert [(c.sku_id, c.pending_gpus) for c in rec.asked] == [(H100, 0)]
    planner = NodeReleasePlanner(ControlLoop.gpufleet(0).node_scaler, BUILTIN_PRICE_CATALOG)  # the loop's scaler
    released: list[str] = []
    t = 0.0
    while not released and t < 6 * 3600:
        released = [r.node for r in planner.plan(Observation(T0 + t, (node("idle"),), (pending,)))]
        t += 60
    assert released == ["idle"]


def test_the_start_buffer_of_a_product_does_not_count_jobs_pinned_to_another() -> None:
    """Review (fixed), the defect: ``late_starts`` (the start buffer's reading per product) skips a waiting job only
    when its ``request.gpu_models`` name another product; the adapter never sets them, so an A100 job waiting for an
    hour counted as a late H100 start, and the H100 buffer grew for it: placeholder pods then had Karpenter launch
    idle H100 nodes that the A100 job can never use."""
    waiting = _pinned("a100-job", A100)
    assert late_starts([waiting], H100, T0, 6 * 3600, 60) == (0, 0)
    assert late_starts([waiting], A100, T0, 6 * 3600, 60) == (1, 1)
