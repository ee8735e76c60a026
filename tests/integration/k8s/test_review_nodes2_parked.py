"""Review (nodes2): a parked node (gpufleet's own cordon) across controller restarts, on the real API server
(kube-apiserver v1.20.2 of the session's fixture)."""

from __future__ import annotations

import uuid
from pathlib import Path

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.labels import A_IDLE_SINCE
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.autoscale.node_rules import rent_or_buy_hold_s
from gpufleet.autoscale.nodes_payoff import LOOP_DELAY_WEIGHT, MIN_BILLING_S
from gpufleet.control.node_release import NodeRelease
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, wait_for
from tests.integration.k8s.test_node_release import FakeClock, _exists

RESTART_EVERY_S = 300  # a crash loop: the controller runs five minutes, then starts again


def _rounds(kubeconfig: Path, clock: FakeClock, node: str, rounds: int) -> list[tuple[NodeRelease, str]]:
    """One controller's life (a process of its own: its own client, whose watches end with it): ``rounds``
    release rounds a minute apart, then it ends (as a crash would)."""
    kube = Kube.from_kubeconfig(str(kubeconfig))
    ctl = Controller(kube, ControllerConfig(release_every_s=60, node_start_s=600), clock=clock).start()
    try:
        assert wait_for(lambda: node in {n.name for n in ctl.view.observation().nodes}, 30)
        done: list[tuple[NodeRelease, str]] = []
        for _ in range(rounds):
            done += [(r, out) for r, out in ctl.maybe_release() if r.node == node]
            clock.t += 60
            if done:
                break
        return done
    finally:
        ctl.stop()
        ctl.view.stop()
        kube.close()


def test_a_crash_looping_controller_still_releases_a_parked_node(
    kube: Kube, kubeconfig: Path, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (fixed), the defect: the release planner kept when it first saw a parked node idle in memory only. A
    controller that restarts more often than the scaler's minimum idle time (here every 5 minutes: a crash loop, a
    Lease passed between replicas) saw the drained, empty node anew each time, never offered it, and the node was
    paid for good; so was an ordinary idle node (the loop's scaler holds an idle on-demand node 51 minutes, which a
    parked node the scaler keeps becomes). The cordon now carries when it was placed (``gpufleet.io/parked-at``)
    and the controller writes each idle spell's start on its node (``gpufleet.io/idle-since``): a controller's
    first round reads them."""
    node = f"pk{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(node)])
    clock = FakeClock()
    assert Actuator(kube, clock=clock).cordon_own(node, "consolidation") == "applied"  # a drain's cordon
    buy_s = rent_or_buy_hold_s(600, MIN_BILLING_S, LOOP_DELAY_WEIGHT, 1.0)
    start = clock.t
    done: list[tuple[NodeRelease, str]] = []
    while not done and clock.t - start < 3 * buy_s:
        done = _rounds(kubeconfig, clock, node, RESTART_EVERY_S // 60)
    assert [out for _, out in done] == ["released"]
    assert buy_s <= done[0][0].idle_for_s <= clock.t - start  # its idle time ran on from the cordon, through restarts
    assert wait_for(lambda: not _exists(kube, node), 10)


def test_a_busy_node_with_an_idle_mark_written_by_hand_is_kept_and_loses_the_mark(
    kube: Kube, kubeconfig: Path, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (holds): a mark is read only for a node found empty; a busy node that carries one (a user's, or one
    left by a spell that ended while no controller ran) is not released, and the controller removes the mark."""
    node = f"pk{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(node)])
    kubelet.start()
    body = pod_body("w", PodRequest("x", 1000, 1024, 1, 1000), "none", labels={"gpufleet.io/kind": "training"})
    body["spec"]["nodeName"] = node
    create_pod(kube, ns, body)
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"annotations": {A_IDLE_SINCE: "2000-01-01T00:00:00Z"}}})
    assert _rounds(kubeconfig, FakeClock(), node, 3) == []
    assert _exists(kube, node)
    assert A_IDLE_SINCE not in (kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {})
