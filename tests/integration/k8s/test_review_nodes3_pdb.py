"""Review nodes3: a PodDisruptionBudget's refusal of an eviction on the real API server (v1.20.2) is a refusal, not
a transient error: posted once by the drain, and a preemption it refused does not come back every tick."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.controller import ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.reclaim import apply_drain
from gpufleet.adapters.kubernetes.rest import JSON, ApiError, Kube
from gpufleet.control.reclaim import NodeDrain
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, running_controller, wait_for

PC = "/apis/scheduling.k8s.io/v1/priorityclasses"


class CountingKube(Kube):
    """The test's Kube, counting the eviction POSTs it sends."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(kube.cfg)
        self.evictions = 0
        self._count_lock = threading.Lock()

    def post(self, path: str, body: JSON) -> JSON:
        if path.endswith("/eviction"):
            with self._count_lock:
                self.evictions += 1
        return super().post(path, body)


@pytest.fixture
def counting(kube: Kube) -> Iterator[CountingKube]:
    k = CountingKube(kube)
    yield k
    k.close()


def _pdb(kube: Kube, ns: str, app: str) -> None:
    """A PDB that allows no disruption of ``app``'s pods, once the disruption controller (the fake kubelet) read it."""
    pdb = {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": f"keep-{app}"},
           "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": app}}}}  # fmt: skip
    kube.post(f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets", pdb)
    path = f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/keep-{app}"
    assert wait_for(lambda: "observedGeneration" in kube.get(path).get("status", {}), 20)


def _running(kube: Kube, ns: str, name: str, node: str, gpus: int, pc: str = "") -> None:
    labels = {"gpufleet.io/kind": "training", "app": name}
    body = pod_body(name, PodRequest("x", 1000, 1024, gpus, 1000), "none", labels=labels, priority_class=pc)
    body["spec"]["nodeName"] = node
    create_pod(kube, ns, body)
    assert wait_for(lambda: all(p["status"].get("phase") == "Running" for p in pods_in(kube, ns)), 30)


def test_pdb_refusal_is_posted_once(counting: CountingKube, kube: Kube, kubelet: FakeKubelet, ns: str) -> None:
    """Review (fixed), the defect: the Actuator retried every 429, so a PDB's refusal (1.20 answers 429, reason
    TooManyRequests, cause ``DisruptionBudget``, no Retry-After) was posted 4 times in 0.35 s before the drain
    stopped ``blocked_by_pdb``. A refusal is final for this drain: one POST, recorded with the budget's cause."""
    node = f"q{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(node, gpus=8)])
    kubelet.start()
    _running(kube, ns, "kept", node, 1)
    _pdb(kube, ns, "kept")
    act = Actuator(counting)
    drain = NodeDrain(node, (f"{ns}/kept",), (), 0, "consolidate")
    assert apply_drain(act, drain, checkpoint_timeout_s=5) == "blocked_by_pdb"
    assert counting.evictions == 1
    (ev,) = [a for a in act.audit if a["action"] == "evict"]
    assert ev["outcome"] == "refused_429" and ev["status"] == 429
    assert "disruption budget" in ev["message"]
    assert any("keep-kept" in c for c in ev.get("causes", [])), ev


@pytest.fixture
def classes(kube: Kube) -> Iterator[tuple[str, str]]:
    tag = uuid.uuid4().hex[:6]
    names = (f"low-{tag}", f"high-{tag}")
    for name, value in zip(names, (100, 10_000), strict=True):
        kube.post(PC, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                       "value": value})  # fmt: skip
    yield names
    for name in names:
        try:
            kube.delete(f"{PC}/{name}")
        except ApiError as exc:
            if exc.status != 404:
                raise


def test_preemption_refused_by_a_pdb_does_not_loop(
    counting: CountingKube, kube: Kube, kubelet: FakeKubelet, ns: str, classes: tuple[str, str]
) -> None:
    """Review (fixed), the defect: a preemption whose victim's PDB refused the eviction was cancelled and decided
    again on the next tick (0.2 s), the same victim every time: a tight eviction loop against the budget (with the
    retries, ~20 POSTs in 4 s). The refused victim is now barred from preemption for ``PreemptConfig.refused_s``
    (the planner's rule; the controller only reports which victim was refused)."""
    low, high = classes
    node = f"q{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(node, gpus=8)])
    kubelet.start()
    _running(kube, ns, "kept", node, 8, low)
    _pdb(kube, ns, "kept")
    body = pod_body("urgent", PodRequest("x", 1000, 1024, 8, 1000), f"s-{ns}", labels={"gpufleet.io/kind": "training"},
                    priority_class=high)  # fmt: skip
    create_pod(kube, ns, body)
    cfg = ControllerConfig(scheduler_name=f"s-{ns}", namespace=ns, lease_name=f"l-{ns}", checkpoint_timeout_s=5)
    with running_controller(counting, cfg) as ctl:
        assert wait_for(lambda: counting.evictions >= 1, 30)
        first = time.monotonic()
        time.sleep(4.0)
        late = counting.evictions
        refused: list[Any] = [r for r in ctl.preempt_results if "blocked_by_pdb" in r[1].values()]
        no_preempt = [(n.key, n.reason) for n in ctl.last_no_preempt]
    assert time.monotonic() - first >= 4.0
    assert late == 1, f"{late} eviction POSTs in 4 s against a PDB that forbids them"
    assert refused and refused[0][0] == f"{ns}/urgent"
    assert (f"{ns}/urgent", "no_eligible_victims") in no_preempt
    pods = {p["metadata"]["name"]: p for p in pods_in(kube, ns)}
    assert set(pods) == {"kept", "urgent"} and not pods["urgent"]["spec"].get("nodeName")
