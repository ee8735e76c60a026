"""A kwok-like stand-in for kubelets (and the disruption controller) on a cluster with no real nodes.

Used by the tests and by ``gpufleet bench k8s``: the API server is real, the nodes are simulated.
- :meth:`FakeKubelet.register` creates Nodes and sets their status (capacity/allocatable with
  ``nvidia.com/gpu`` and MIG resources, Ready) through the ``nodes/status`` subresource, with the labels a
  GPU operator (``nvidia.com/gpu.product``), Karpenter (``karpenter.sh/capacity-type``, ``karpenter.sh/nodepool``)
  and the cloud (zone, instance type) would set.
- :meth:`FakeKubelet.sync` marks bound Pending pods Running, finalises pods being deleted (a kubelet
  confirms graceful deletion; without one they stay Terminating), answers the checkpoint handshake for
  pods whose trainer cooperates (docs/kubernetes.md), and sets PodDisruptionBudget status as the
  disruption controller would (``disruptionsAllowed`` from healthy matching pods).
- :meth:`FakeKubelet.finish` ends a pod; :meth:`FakeKubelet.lose_node` reports a node NotReady and fails its pods.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufleet.adapters.kubernetes.rest import JSON, ApiError, Kube

A_CKPT_REQUESTED = "gpufleet.io/checkpoint-requested"
A_CKPT_DONE = "gpufleet.io/checkpoint-done"
L_COOPERATES = "test.gpufleet.io/checkpoints"  # fake-trainer switch: answers the handshake when "true"


@dataclass(frozen=True, slots=True)
class FakeNode:
    name: str
    gpus: int = 8
    cpu: str = "128"
    memory: str = "1024Gi"
    product: str = "NVIDIA-H100-80GB-HBM3"
    zone: str = "us-east-1a"
    instance_type: str = "p5.48xlarge"
    capacity_type: str = "on-demand"
    node_pool: str = "on-demand"
    rack: str = ""
    nvlink: str = ""
    mig: dict[str, int] = field(default_factory=dict)
    extra_labels: dict[str, str] = field(default_factory=dict)

    def labels(self) -> dict[str, str]:
        out = {
            "kubernetes.io/hostname": self.name,
            "node.kubernetes.io/instance-type": self.instance_type,
            "topology.kubernetes.io/zone": self.zone,
            "topology.kubernetes.io/region": self.zone[:-1],
            "karpenter.sh/capacity-type": self.capacity_type,
            "karpenter.sh/nodepool": self.node_pool,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(self.gpus),
        }
        if self.gpus:
            out["nvidia.com/gpu.product"] = self.product
        if self.rack:
            out["topology.gpufleet.io/rack"] = self.rack
        if self.nvlink:
            out["topology.gpufleet.io/nvlink-domain"] = self.nvlink
        return out | self.extra_labels


def _selects(selector: JSON, labels: dict[str, str]) -> bool:
    want = selector.get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in want.items())


class FakeKubelet:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.registered: list[str] = []

    def register(self, nodes: Iterable[FakeNode]) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for n in nodes:
            self.registered.append(n.name)
            self.kube.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                             "metadata": {"name": n.name, "labels": n.labels()}})  # fmt: skip
            res = {"cpu": n.cpu, "memory": n.memory, "pods": "256", "nvidia.com/gpu": str(n.gpus)}
            res |= {f"nvidia.com/mig-{p}": str(c) for p, c in n.mig.items()}
            cond = {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now,
                    "lastTransitionTime": now}  # fmt: skip
            self.kube.patch(f"/api/v1/nodes/{n.name}/status",
                            {"status": {"capacity": res, "allocatable": res, "conditions": [cond]}})  # fmt: skip
            # the TaintNodesByCondition admission plugin taints new nodes not-ready; the node lifecycle
            # controller (not running here) lifts that taint once the node is Ready: play it too
            self.kube.patch(f"/api/v1/nodes/{n.name}", {"spec": {"taints": None}})

    def lose_node(self, name: str) -> None:
        """The node stops reporting: NotReady, and its pods fail (reason NodeLost)."""
        self.kube.patch(f"/api/v1/nodes/{name}/status",
                        {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeLost"}]}})  # fmt: skip
        for p in self.kube.get("/api/v1/pods", fieldSelector=f"spec.nodeName={name}").get("items", []):
            self._phase(p, "Failed", "NodeLost")

    def finish(self, namespace: str, name: str, phase: str = "Succeeded") -> None:
        self._phase(self.kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}"), phase, "Completed")

    def _phase(self, pod: JSON, phase: str, reason: str) -> None:
        m = pod["metadata"]
        self.kube.patch(f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}/status",
                        {"status": {"phase": phase, "reason": reason}})  # fmt: skip

    def sync(self) -> int:
        """One pass over pods and PDBs (see the module docstring). Returns the number of changes made."""
        changes = 0
        pods = self.kube.get("/api/v1/pods").get("items", [])
        for p in pods:
            m, spec, st = p["metadata"], p["spec"], p.get("status", {})
            path = f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}"
            try:
                if m.get("deletionTimestamp"):
                    self.kube.request("DELETE", path, {"gracePeriodSeconds": 0})
                    changes += 1
                    continue
                if spec.get("nodeName") and st.get("phase", "Pending") == "Pending":
                    cond = [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]
                    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    self.kube.patch(f"{path}/status",
                                    {"status": {"phase": "Running", "conditions": cond, "startTime": started}})  # fmt: skip
                    changes += 1
                ann = m.get("annotations") or {}
                req = ann.get(A_CKPT_REQUESTED)
                coop = (m.get("labels") or {}).get(L_COOPERATES) == "true"
                if req and coop and ann.get(A_CKPT_DONE) != req:
                    self.kube.patch(path, {"metadata": {"annotations": {A_CKPT_DONE: req}}})
                    changes += 1
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise
        for pdb in self.kube.get("/apis/policy/v1beta1/poddisruptionbudgets").get("items", []):
            changes += self._pdb_status(pdb, pods)
        return changes

    def _pdb_status(self, pdb: JSON, pods: list[JSON]) -> int:
        m, spec = pdb["metadata"], pdb.get("spec", {})
        sel = spec.get("selector") or {}
        healthy = sum(
            1
            for p in pods
            if p["metadata"]["namespace"] == m["namespace"]
            and _selects(sel, p["metadata"].get("labels") or {})
            and p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        )
        expected = healthy
        if "minAvailable" in spec:
            desired = int(spec["minAvailable"])
        else:
            desired = max(0, expected - int(spec.get("maxUnavailable", 0)))
        status = {"observedGeneration": m.get("generation", 1), "disruptionsAllowed": max(0, healthy - desired),
                  "currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
                  "disruptedPods": {}}  # fmt: skip
        cur = pdb.get("status", {})
        if all(cur.get(k) == v for k, v in status.items() if k != "disruptedPods"):
            return 0
        body = dict(pdb, status=status)
        try:
            self.kube.put(
                f"/apis/policy/v1beta1/namespaces/{m['namespace']}/poddisruptionbudgets/{m['name']}/status", body
            )
        except ApiError as exc:
            if exc.status != 409:
                raise
        return 1

    def start(self, period_s: float = 0.2) -> FakeKubelet:
        def loop() -> None:
            while not self._stop.wait(period_s):
                with contextlib.suppress(ApiError):
                    self.sync()

        self._thread = threading.Thread(target=loop, name="fake-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def remove_nodes(self) -> None:
        """Delete every Node this kubelet registered (tests share one cluster)."""
        for name in self.registered:
            try:
                self.kube.delete(f"/api/v1/nodes/{name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
        self.registered.clear()
