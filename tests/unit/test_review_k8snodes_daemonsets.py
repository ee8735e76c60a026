"""Review (k8snodes): the node release (control/node_release.py) on nodes that hold only node-bound pods."""

from __future__ import annotations

from gpufleet.control.node_release import NodeReleasePlanner
from gpufleet.control.observation import Observation, ObservedPod
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.schedule.table import PodRequest
from tests.unit.test_node_release import H100, T0, Recorder, node


def _node_bound(name: str, on: str, owner_kind: str) -> ObservedPod:
    """A pod of a DaemonSet (a GPU device plugin, a DCGM exporter, kube-proxy) or a static pod (its mirror is owned
    by the Node), bound to ``on``, holding no GPU."""
    req = PodRequest(f"kube-system/{name}", 100, 64, 0, 0)
    owner = on if owner_kind == "Node" else "nvidia-device-plugin"
    return ObservedPod(req, "kube-system", name, f"uid-{name}", "Running", node=on, owner_kind=owner_kind,
                       owner_name=owner)  # fmt: skip


def test_a_node_with_only_daemonset_and_static_pods_is_idle() -> None:
    """Review (fixed), the defect: NodeReleasePlanner.contexts counts every active bound pod as making its node busy,
    DaemonSet pods and static (mirror) pods too. Every GPU node of a real cluster runs the GPU device plugin's
    DaemonSet pod (and kube-proxy, a node exporter...), so no idle launched GPU node was ever offered to the node
    scaler: the release (``--release-every-s``) released nothing and the fleet spec's ``release: gpufleet`` had
    turned Karpenter's own consolidation off (consolidateAfter Never), so idle on-demand GPU nodes were paid for
    until someone noticed. Cluster Autoscaler and Karpenter both leave DaemonSet and mirror pods out when they judge
    a node empty; so does gpufleet's own consolidation (control/reclaim.py). A node with a real pod (no GPU) stays
    busy."""
    rec = Recorder()
    planner = NodeReleasePlanner(rec, BUILTIN_PRICE_CATALOG)
    cpu_pod = ObservedPod(PodRequest("ml/web", 500, 64, 0, 0), "ml", "web", "uid-web", "Running", node="od-cpu-pod")
    fleet = [node("od-daemons"), node("od-cpu-pod")]
    pods = [_node_bound("dp-a", "od-daemons", "DaemonSet"), _node_bound("static-a", "od-daemons", "Node"),
            _node_bound("dp-b", "od-cpu-pod", "DaemonSet"), cpu_pod]  # fmt: skip
    planner.plan(Observation(T0, tuple(fleet), tuple(pods)))
    got = planner.plan(Observation(T0 + 601, tuple(fleet), tuple(pods)))
    assert [(r.node, r.sku) for r in got] == [("od-daemons", H100)]
    assert [n.gpus for n in rec.asked[-1].idle] == [8]
