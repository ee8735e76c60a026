"""The cluster as the loop's observation: informers on Nodes, Pods, Deployments, Kueue Workloads and Karpenter
NodePools.

:class:`ClusterView` starts one :class:`Informer` per kind (Workloads only when the Kueue CRD is served, NodePools
only when Karpenter's v1 CRD is) and
turns the caches into an :class:`~gpufleet.control.observation.Observation`. Converted objects are cached per
``resourceVersion``, so a tick over thousands of unchanged pods costs a dictionary lookup each.
An object gpufleet cannot read (a bad quantity, say) is left out and counted in ``bad_objects`` with the error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gpufleet.adapters.kubernetes.deployment_json import deployment_from_json
from gpufleet.adapters.kubernetes.informer import Informer
from gpufleet.adapters.kubernetes.labels import (
    TopologyIds,
    node_from_json,
    node_pool_from_json,
    pod_footprint,
    pod_from_json,
    workload_from_json,
)
from gpufleet.adapters.kubernetes.rest import JSON, ApiError, Kube
from gpufleet.control.observation import Observation
from gpufleet.domain.errors import ValidationError

WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/workloads"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"


def served(kube: Kube, path: str) -> bool:
    try:
        kube.get(path, limit=1)
        return True
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise


class ClusterView:
    def __init__(self, kube: Kube, *, resync_s: float = 300.0, clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.clock = clock
        self.changed = threading.Event()
        kw: dict[str, Any] = {"resync_s": resync_s, "on_change": self.changed.set}
        self.nodes = Informer(kube, "/api/v1/nodes", **kw)
        self.pods = Informer(kube, "/api/v1/pods", **kw)
        self.deployments = Informer(kube, "/apis/apps/v1/deployments", **kw)
        self.workloads: Informer | None = Informer(kube, WORKLOADS, **kw) if served(kube, WORKLOADS) else None
        self.node_pools: Informer | None = Informer(kube, NODEPOOLS, **kw) if served(kube, NODEPOOLS) else None
        self._topo = TopologyIds()
        self._cache: dict[tuple[str, str], Any] = {}
        self.bad_objects: dict[str, str] = {}

    def informers(self) -> list[Informer]:
        return [i for i in (self.nodes, self.pods, self.deployments, self.workloads, self.node_pools) if i is not None]

    def start(self, timeout_s: float = 30.0) -> ClusterView:
        for inf in self.informers():
            inf.start()
        for inf in self.informers():
            if not inf.wait_synced(timeout_s):
                raise ApiError(0, "NotSynced", f"{inf.path} did not list within {timeout_s} s")
        return self

    def stop(self) -> None:
        for inf in self.informers():
            inf.stop()

    def _convert(
        self, kind: str, obj: JSON, fn: Callable[[JSON], Any], fallback: Callable[[JSON], Any] | None = None
    ) -> Any:
        """``fn(obj)``, cached by resource version; an object it refuses is a bad object (``fallback``'s reading, if
        any, stands in for it: a pod's footprint on its node)."""
        meta = obj.get("metadata", {})
        key = (f"{kind}:{meta.get('namespace', '')}/{meta.get('name', '')}", str(meta.get("resourceVersion", "")))
        got = self._cache.get(key)
        if got is None:
            try:
                got = fn(obj)
                self.bad_objects.pop(key[0], None)
            except ValidationError as exc:
                self.bad_objects[key[0]] = str(exc)
                got = None if fallback is None else fallback(obj)
                if got is None:
                    return None
            self._cache[key] = got
        return got

    def observation(self) -> Observation:
        self.changed.clear()
        nodes = [self._convert("node", o, lambda o: node_from_json(o, self._topo)) for o in self.nodes.snapshot()]
        pods = [self._convert("pod", o, pod_from_json, pod_footprint) for o in self.pods.snapshot()]
        deps = [self._convert("deploy", o, deployment_from_json) for o in self.deployments.snapshot()]
        wls = [self._convert("wl", o, workload_from_json) for o in self.workloads.snapshot()] if self.workloads else []
        nps = (
            [self._convert("np", o, node_pool_from_json) for o in self.node_pools.snapshot()]
            if self.node_pools
            else None
        )
        if len(self._cache) > 4 * (len(nodes) + len(pods) + len(deps) + len(wls) + len(nps or ())) + 1000:
            self._cache.clear()  # drop versions that are gone
        return Observation(
            now_s=self.clock(),
            nodes=tuple(n for n in nodes if n is not None),
            pods=tuple(p for p in pods if p is not None),
            deployments=tuple(d for d in deps if d is not None),
            workloads=tuple(w for w in wls if w is not None),
            # a NodePool it cannot read could launch anything: then no NodePool bound is known (None)
            node_pools=tuple(nps) if nps is not None and None not in nps else None,
            resource_versions={i.path: i.resource_version for i in self.informers()},
        )
