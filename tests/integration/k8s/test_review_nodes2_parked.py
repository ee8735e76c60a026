"""Review (nodes2): a parked node (gpufleet's own cordon) across controller restarts, on the real API server
(kube-apiserver v1.20.2 of the session's fixture)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.autoscale.node_rules import rent_or_buy_hold_s
from gpufleet.autoscale.nodes_payoff import LOOP_DELAY_WEIGHT, MIN_BILLING_S
from gpufleet.control.node_release import NodeRelease
from tests.integration.k8s.helpers import wait_for
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
        return done
    finally:
        ctl.stop()
        ctl.view.stop()
        kube.close()


@pytest.mark.xfail(strict=True, reason="a parked node's idle time starts again at every controller start")
def test_a_crash_looping_controller_still_releases_a_parked_node(
    kube: Kube, kubeconfig: Path, kubelet: FakeKubelet, ns: str
) -> None:
    """The defect: the release planner keeps when it first saw a parked node idle in memory only. A controller
    that restarts more often than the scaler's minimum idle time (here every 5 minutes: a crash loop, a Lease
    passed between replicas) sees the drained, empty node anew each time, never offers it, and the node is paid
    for good."""
    node = f"pk{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(node)])
    clock = FakeClock()
    assert Actuator(kube, clock=clock).cordon_own(node, "consolidation") == "applied"  # a drain's cordon
    buy_s = rent_or_buy_hold_s(600, MIN_BILLING_S, LOOP_DELAY_WEIGHT, 1.0)
    start = clock.t
    done: list[tuple[NodeRelease, str]] = []
    while not done and clock.t - start < 3 * buy_s:
        done = _rounds(kubeconfig, clock, node, RESTART_EVERY_S // 60)
    assert [(r.parked, out) for r, out in done] == [(True, "released")]
    assert not _exists(kube, node)
