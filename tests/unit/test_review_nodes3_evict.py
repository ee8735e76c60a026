"""Review nodes3: the Eviction API's 429s. A PodDisruptionBudget's refusal (cause ``DisruptionBudget``, no
Retry-After) and the API server's throttling (max-in-flight or priority and fairness: ``Retry-After`` and a plain
text body) are different answers: the first is not retried, the second waits what the server asks; and a victim
refused by its budget is not named again at once by the preemption planner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.reclaim import apply_drain
from gpufleet.adapters.kubernetes.rest import Kube, KubeConfig
from gpufleet.control.binding import BindingPlanner
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.control.preempting import PreemptConfig
from gpufleet.control.reclaim import NodeDrain
from gpufleet.schedule.table import NodeSpec, PodRequest
from tests.loopback import serve, stop

PDB_BODY = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.", "reason": "TooManyRequests",
            "details": {"causes": [{"reason": "DisruptionBudget",
                                    "message": "The disruption budget keep needs 1 healthy pods and has 1 currently"}]},
            "code": 429}  # fmt: skip
POD = {"metadata": {"name": "v", "namespace": "ns", "uid": "uid-v"}, "spec": {"nodeName": "n0"},
       "status": {"phase": "Running"}}  # fmt: skip


class Api:
    """A loopback stand-in for the API server: each eviction POST takes the next of ``answers`` (the last repeats):
    ``pdb`` (1.20's refusal, as recorded from the real server), ``throttle`` (429, ``Retry-After``, text body as
    the max-in-flight and APF filters send) or ``ok`` (201)."""

    def __init__(self, answers: list[str], retry_after: str = "2") -> None:
        self.answers = answers
        self.retry_after = retry_after
        self.evictions = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.startswith("/apis/policy"):
                    self._send(200, json.dumps({"versions": [{"version": "v1beta1"}]}).encode(), "application/json")
                else:
                    self._send(200, json.dumps(POD).encode(), "application/json")

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self.path.endswith("/eviction"):
                    self._send(201, b"{}", "application/json")
                    return
                kind = api.answers[min(api.evictions, len(api.answers) - 1)]
                api.evictions += 1
                if kind == "pdb":
                    self._send(429, json.dumps(PDB_BODY).encode(), "application/json")
                elif kind == "throttle":
                    self._send(429, b"Too many requests, please try again later.\n", "text/plain; charset=utf-8",
                               {"Retry-After": api.retry_after})  # fmt: skip
                else:
                    self._send(201, json.dumps({"kind": "Status", "status": "Success"}).encode(), "application/json")

            def log_message(self, *_: Any) -> None:
                pass

        self.server: ThreadingHTTPServer
        self.server, self.url = serve(Handler)


@pytest.fixture
def api_factory() -> Iterator[Any]:
    made: list[tuple[Api, Kube]] = []

    def make(answers: list[str], retry_after: str = "2") -> tuple[Api, Actuator, list[float]]:
        api = Api(answers, retry_after)
        kube = Kube(KubeConfig(server=api.url))
        made.append((api, kube))
        slept: list[float] = []
        return api, Actuator(kube, sleep=slept.append), slept

    yield make
    for api, kube in made:
        kube.close()
        stop(api.server)


def test_pdb_refusal_is_not_retried(api_factory: Any) -> None:
    """Review (fixed), the defect: a PDB's refusal (429) was retried as a transient error, 4 POSTs in 0.35 s."""
    api, act, slept = api_factory(["pdb"])
    assert act.evict("ns", "v", "consolidate") == "refused_429"
    assert api.evictions == 1 and slept == []
    (ev,) = act.audit
    assert ev["causes"] == ["DisruptionBudget: The disruption budget keep needs 1 healthy pods and has 1 currently"]


def test_throttled_eviction_honours_retry_after(api_factory: Any) -> None:
    """Review (fixed), the defect: a throttled request (429 with Retry-After: 2) was retried after 0.05 s, then
    0.1 s, then 0.2 s: three more requests against a server that asked for two seconds of quiet."""
    api, act, slept = api_factory(["throttle", "ok"])
    assert act.evict("ns", "v", "consolidate") == "applied"
    assert api.evictions == 2 and slept == [2.0]


def test_retry_after_is_capped_and_garbage_falls_back_to_backoff(api_factory: Any) -> None:
    """Review (fixed): a Retry-After of an hour does not stall an actuator thread for an hour (capped at
    ``RETRY_AFTER_MAX_S``, 30 s); one that is no number of seconds (an HTTP date, garbage) falls back to the backoff."""
    _, act, slept = api_factory(["throttle", "ok"], retry_after="3600")
    assert act.evict("ns", "v", "consolidate") == "applied"
    assert slept == [30.0]
    _, act, slept = api_factory(["throttle", "ok"], retry_after="Wed, 21 Oct 2015 07:28:00 GMT")
    assert act.evict("ns", "v", "consolidate") == "applied"
    assert slept == [0.05]


def test_throttling_that_lasts_is_no_pdb_block(api_factory: Any) -> None:
    """Review (fixed), the defect: an eviction still throttled after the retries was recorded ``refused_429`` and
    the drain stopped as ``blocked_by_pdb``, blaming a budget that refused nothing. Now ``throttled`` / ``failed``."""
    api, act, slept = api_factory(["throttle"], retry_after="1")
    drain = NodeDrain("n0", ("ns/v",), (), 0, "consolidate")
    assert apply_drain(act, drain, cordon=False) == "failed"
    assert api.evictions == 4 and slept == [1.0, 1.0, 1.0]
    assert [a["outcome"] for a in act.audit if a["action"] == "evict"] == ["throttled"]
    api, act, slept = api_factory(["pdb"])
    refused: list[str] = []  # the pods their budgets refused, for the preemption planner
    assert apply_drain(act, drain, cordon=False, refused=refused) == "blocked_by_pdb"
    assert refused == ["ns/v"]


NOW = 100_000


def _obs(pods: list[ObservedPod], now: float) -> Observation:
    node = ObservedNode(NodeSpec("n0", 64_000, 512 * 1024, 8, "H100"), sku="H100")
    return Observation(now, (node,), tuple(pods))


def _pods() -> list[ObservedPod]:
    def pod(name: str, node: str, prio: int) -> ObservedPod:
        return ObservedPod(PodRequest(f"ns/{name}", 1000, 1024, 8, 1000), "ns", name, f"uid-{name}",
                           "Running" if node else "Pending", node=node, scheduler_name="gpufleet" if not node else "x",
                           priority=prio, kind="training", checkpointable=True, created="2026-01-01T00:00:00Z",
                           started_s=NOW - 3600 if node else None)  # fmt: skip

    return [pod("low", "n0", 1), pod("high", "", 100)]


def _round(pl: BindingPlanner, now: float) -> tuple[Any, Any]:
    obs = _obs(_pods(), now)
    return pl.preempt(obs, pl.plan(obs).unschedulable)


def test_victim_refused_by_its_pdb_is_not_named_again_at_once() -> None:
    """Review (fixed), the defect: a cancelled preemption was decided again on the next tick, the same victim,
    however often its PodDisruptionBudget refused: a tight eviction loop. A refused victim is barred for
    ``PreemptConfig.refused_s``, doubled on each refusal in a row (up to ``refused_max_s``)."""
    pl = BindingPlanner(preempt_cfg=PreemptConfig(refused_s=60, refused_max_s=200))
    (d,), _ = _round(pl, NOW)
    assert [v.uid for v in d.victims] == ["uid-low"]
    pl.cancel(d, "blocked_by_pdb", refused=("uid-low",), at_s=NOW)
    assert pl.dropped[-1] == ("ns/high", "blocked_by_pdb")
    decided, none = _round(pl, NOW + 0.2)
    assert decided == () and [(n.key, n.reason) for n in none] == [("ns/high", "no_eligible_victims")]
    assert _round(pl, NOW + 59)[0] == ()
    (d,), _ = _round(pl, NOW + 61)  # the budget may allow it now: asked again
    pl.cancel(d, "blocked_by_pdb", refused=("uid-low",), at_s=NOW + 61)
    assert _round(pl, NOW + 61 + 119)[0] == ()  # refused twice in a row: 120 s
    (d,), _ = _round(pl, NOW + 61 + 121)
    pl.cancel(d, "blocked_by_pdb", refused=("uid-low",), at_s=NOW + 182)
    assert _round(pl, NOW + 182 + 199)[0] == ()  # 240 s capped at 200 s
    (d,), _ = _round(pl, NOW + 182 + 201)
    pl.cancel(d, "eviction_failed", at_s=NOW + 383)  # another failure (a checkpoint timeout) bars nobody
    assert len(_round(pl, NOW + 383.2)[0]) == 1
