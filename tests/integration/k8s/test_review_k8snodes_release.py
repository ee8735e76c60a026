"""Review (k8snodes): the controller's node release (control/node_release.py, adapters/kubernetes/reclaim.py
``apply_release``) on the real API server: a node that runs only DaemonSet and static pods, and a delete the API
server refuses."""

from __future__ import annotations

import uuid
from typing import Any

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.reclaim import apply_release
from gpufleet.adapters.kubernetes.rest import Kube, KubeConfig
from gpufleet.autoscale.node_rules import rent_or_buy_hold_s
from gpufleet.autoscale.nodes_payoff import LOOP_DELAY_WEIGHT, MIN_BILLING_S
from gpufleet.control.node_release import NodeRelease
from tests.integration.k8s.helpers import create_pod, pods_in, wait_for
from tests.integration.k8s.test_node_release import FakeClock, _decided, _exists


def _daemon_pods(kube: Kube, ns: str, node: str) -> None:
    """A GPU device plugin's DaemonSet pod and a static pod's mirror on ``node``, as their controllers leave them."""
    ds = kube.post(f"/apis/apps/v1/namespaces/{ns}/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin"},
        "spec": {"selector": {"matchLabels": {"app": "dp"}},
                 "template": {"metadata": {"labels": {"app": "dp"}},
                              "spec": {"containers": [{"name": "dp", "image": "nvcr.io/nvidia/k8s-device-plugin"}]}}},
    })  # fmt: skip
    node_uid = kube.get(f"/api/v1/nodes/{node}")["metadata"]["uid"]
    owners: list[tuple[str, dict[str, Any], dict[str, str]]] = [
        (f"dp-{node}", {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "nvidia-device-plugin",
                        "uid": ds["metadata"]["uid"], "controller": True}, {}),
        (f"exporter-{node}", {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True},
         {"kubernetes.io/config.mirror": "abc", "kubernetes.io/config.source": "file"}),
    ]  # fmt: skip
    for name, owner, ann in owners:
        create_pod(kube, ns, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "ownerReferences": [owner], "annotations": ann, "labels": {"app": "dp"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                                       "resources": {"requests": {"cpu": "50m"}}}]},
        })  # fmt: skip


def test_an_idle_node_running_only_daemonset_and_static_pods_is_released(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (fixed), the defect: both the planner (every active bound pod makes its node busy) and ``apply_release``
    (every pod not finished on the node stops the release, ``node_busy``) count DaemonSet pods and static pods.
    Every GPU node of a real cluster runs the GPU device plugin's DaemonSet pod, so the controller's release never
    released an idle launched GPU node, while ``release: gpufleet`` had turned Karpenter's consolidation off for
    them: idle on-demand GPU nodes paid for indefinitely. Cluster Autoscaler and Karpenter do not count DaemonSet
    and mirror pods when they judge a node empty; deleting the node takes them with it."""
    p = f"ds{uuid.uuid4().hex[:5]}"
    idle = f"{p}-idle"
    kubelet.register([FakeNode(idle)])
    kubelet.start()
    _daemon_pods(kube, ns, idle)
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    clock = FakeClock()
    ctl = Controller(kube, ControllerConfig(release_every_s=60, node_start_s=600), clock=clock).start()
    try:
        assert wait_for(lambda: len([q for q in ctl.view.observation().pods if q.node == idle]) == 2, 30)
        buy_s = rent_or_buy_hold_s(600, MIN_BILLING_S, LOOP_DELAY_WEIGHT, 1.0)
        released: list[tuple[NodeRelease, str]] = []
        start = clock.t
        while not any(r.node == idle for r, _ in released) and clock.t - start < 3 * buy_s:
            released += ctl.maybe_release()
            clock.t += 60
        assert [(r.node, out) for r, out in released if r.node == idle] == [(idle, "released")]
        assert wait_for(lambda: not _exists(kube, idle), 10)
    finally:
        ctl.stop()
        ctl.view.stop()


def _may_not_delete_nodes(kube: Kube, ns: str) -> Kube:
    """A client of a ServiceAccount that may do all the release does but delete a Node (an RBAC slip, or an
    admission webhook that refuses the delete: the API server answers 403 either way)."""
    suffix = uuid.uuid4().hex[:5]
    kube.post(f"/api/v1/namespaces/{ns}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                           "metadata": {"name": "rel"}})  # fmt: skip
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"rel-{suffix}"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
                      {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}  # fmt: skip
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": f"rel-{suffix}"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"rel-{suffix}"},
               "subjects": [{"kind": "ServiceAccount", "name": "rel", "namespace": ns}]}  # fmt: skip
    kube.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    kube.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    tr = kube.post(f"/api/v1/namespaces/{ns}/serviceaccounts/rel/token", request)
    return Kube(KubeConfig(kube.cfg.server, tr["status"]["token"], verify_tls=False))


def test_a_node_whose_delete_fails_is_not_left_cordoned(kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (fixed), the defect: ``apply_release`` cordons the node, finds it empty, and when the delete then fails
    (403, a 500, a timeout after the retries) returns ``failed`` with the node still cordoned. The planner offers
    only schedulable nodes, so it never retries that node, and no scheduler places on it: a paid GPU node nobody
    uses and nobody releases, until an operator uncordons it by hand. A release that cannot delete must give the
    node back (uncordon), as the ``node_busy`` path does."""
    node = f"nd{uuid.uuid4().hex[:5]}-idle"
    kubelet.register([FakeNode(node)])
    limited = _may_not_delete_nodes(kube, ns)
    try:
        act = Actuator(limited)
        assert apply_release(act, _decided(node)) == "failed"
        assert _exists(kube, node)
        assert ("delete_node", "error") in [(a["action"], a["outcome"]) for a in act.audit]
        assert not kube.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable", False)
    finally:
        limited.close()
