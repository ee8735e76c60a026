"""Review (telemetry2): the controller's replica scaling rounds (adapters/kubernetes/scaling.py) against a slow
Prometheus, and its cadences when the wall clock steps back (an NTP step). The Prometheus is a stand-in on loopback
(tests/loopback.py) that answers every instant query with one series of value 5 after a delay; the actuator is a dry
run (what would be patched is recorded, nothing is sent)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.controller import ControllerConfig
from gpufleet.adapters.kubernetes.rest import Kube, KubeConfig
from gpufleet.adapters.kubernetes.scaling import DeploymentScaling
from gpufleet.adapters.kubernetes.view import ClusterView
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry
from gpufleet.control.observation import DeclaredServing, Observation, ObservedDeployment
from gpufleet.domain.workloads import ServingScaling
from tests import loopback

T0 = 1_800_000_000.0
FLEET = ServingScaling(min_replicas=1, max_replicas=50, target_rps_per_replica=10.0)


class _View:
    """The cluster view's observation: ``n`` opted-in serving Deployments at 2 replicas."""

    def __init__(self, n: int, clock: list[float]) -> None:
        self.deps = tuple(
            ObservedDeployment("web", f"api-{i}", 2, 2, "serving", serving=DeclaredServing(FLEET)) for i in range(n)
        )
        self.clock = clock

    def observation(self) -> Observation:
        return Observation(self.clock[0], (), (), deployments=self.deps)


def _prometheus(delay_s: float, asked: list[float]) -> loopback.JsonHandle:
    def handle(verb: str, target: str, auth: str | None, raw: bytes) -> tuple[int, Any, float]:
        asked.append(time.monotonic())
        result = [{"metric": {}, "value": [T0, "5"]}]
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}, delay_s

    return handle


@pytest.fixture
def slow_prometheus() -> Iterator[tuple[str, list[float]]]:
    asked: list[float] = []
    server, url = loopback.serve_json(_prometheus(0.3, asked))
    try:
        yield url, asked
    finally:
        loopback.stop(server)


def _scaling(url: str, n: int, clock: list[float], **kw: Any) -> tuple[DeploymentScaling, Actuator]:
    cfg = ControllerConfig(scale_every_s=1.0, react_every_s=0.0, scale_history_s=0.0, prometheus_url=url,
                           queue_query="", running_query="", **kw)  # fmt: skip
    kube = Kube(KubeConfig("http://127.0.0.1:9"))  # never asked: a dry run, and no write of its own to read back
    act = Actuator(kube, dry_run=True, clock=lambda: clock[0])
    view: Any = _View(n, clock)
    view_t: ClusterView = view
    return DeploymentScaling(kube, cfg, act, view_t, PrometheusTelemetry(url, timeout_s=5.0), lambda: clock[0]), act


def test_a_slow_prometheus_cannot_hold_a_scaling_round_past_its_deadline(
    slow_prometheus: tuple[str, list[float]],
) -> None:
    """Review (fixed), the defect: a round reads each Deployment's rate (and gauges) one query after another, each up to the
    adapter's timeout (10 s, about twice that for an answer sent a byte at a time); nothing bounds the round as a
    whole. A Prometheus that answers slowly held the round N Deployments x the per-query time (here 10 x 0.3 s
    for a 1 s period; in production 40 Deployments x 20 s = 13 minutes for a 60 s period), while the period's
    decisions waited and the fast path (queue growth) could not run: the worker runs one round at a time.
    A round now has one deadline (``scale_round_s``; 0: the scale period); the Deployments it did not reach keep
    their replicas (nothing is scaled on no data) and are recorded as ``skipped`` with reason ``round_deadline``."""
    url, asked = slow_prometheus
    clock = [T0]
    scaling, act = _scaling(url, 10, clock)
    t0 = time.monotonic()
    plan = scaling.maybe_scale()
    took = time.monotonic() - t0
    assert plan is not None
    assert took < 1.8, f"the round took {took:.1f} s for a 1 s period"
    reached = {d.name for d in plan.decisions}
    skipped = {a["target"].split("/")[1]: a["reason"] for a in act.audit if a["outcome"] == "skipped"}
    assert 0 < len(reached) < 10
    assert set(skipped) == {f"api-{i}" for i in range(10)} - reached
    assert set(skipped.values()) == {"round_deadline"}
    assert not any(a["action"] == "scale" and a["target"].split("/")[1] in skipped and a["outcome"] == "dry_run"
                   for a in act.audit)  # fmt: skip
    assert len(asked) <= len(reached) + 1
    (cut,) = [a for a in act.audit if a["action"] == "scale_round" and a["target"] == "scale"]
    assert cut["reason"] == "round_deadline" and cut["unread"] == len(skipped)


def test_a_clock_stepped_back_does_not_stop_scaling_for_the_size_of_the_step(
    slow_prometheus: tuple[str, list[float]],
) -> None:
    """Review (fixed), the defect: the next period is ``now + scale_every_s`` by the wall clock, and a round runs when
    ``now >= next``. An NTP step back of an hour (a VM resumed, a clock fixed) made every round not due for that
    hour: no serving Deployment was scaled, up or down, for an hour of traffic. A next round more than one period
    ahead of now can only come from a clock that went back: it is due now (adapters/kubernetes/cadence.py, every
    cadence of the controller on its wall clock: scaling, release, consolidation, the store's sync and limits)."""
    url, _ = slow_prometheus
    clock = [T0]
    scaling, _ = _scaling(url, 1, clock)
    assert scaling.maybe_scale() is not None
    clock[0] = T0 - 3600 + 2  # the clock stepped back an hour; two seconds (two periods) have passed
    assert scaling.due()
    assert scaling.maybe_scale() is not None
