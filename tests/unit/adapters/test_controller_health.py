"""The controller's /healthz and /metrics (adapters/kubernetes/health.py), served on a real socket."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.health import ControllerHealth, HealthServer


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_healthz_follows_the_loop_and_metrics_count_the_audit() -> None:
    state: dict[str, Any] = {"leader": True, "error": "", "busy": {"inventory_sync": True, "scale": False},
                             "unschedulable": {"insufficient_gpu": 2, "gang_incomplete": 4}}  # fmt: skip
    health = ControllerHealth(lambda: state, stale_s=60)
    server = HealthServer(health, 0, host="127.0.0.1").start()
    try:
        code, text = _get(server.port, "/healthz")
        assert code == 200 and text.startswith("ok")
        for outcome in ("applied", "applied", "failed"):
            health.record({"action": "bind", "outcome": outcome})
        health.record({"action": "inventory_sync", "outcome": "failed"})
        code, text = _get(server.port, "/metrics")
        assert code == 200
        assert 'gpufleet_controller_actions_total{action="bind",outcome="applied"} 2.0' in text
        assert 'gpufleet_controller_actions_total{action="bind",outcome="failed"} 1.0' in text
        assert 'gpufleet_controller_actions_total{action="inventory_sync",outcome="failed"} 1.0' in text
        assert "gpufleet_controller_leader 1.0" in text
        assert 'gpufleet_controller_unschedulable_pods{reason="gang_incomplete"} 4.0' in text
        assert 'gpufleet_controller_side_work_busy{kind="inventory_sync"} 1.0' in text
        assert 'gpufleet_controller_side_work_busy{kind="scale"} 0.0' in text
        # a loop that has not turned for longer than stale_s: the liveness probe fails, saying how long
        health.stale_s = 0.0
        code, text = _get(server.port, "/healthz")
        assert code == 503 and "last turned" in text
        health.stale_s = 60.0
        health.turned()
        assert _get(server.port, "/healthz")[0] == 200
        state["error"] = "ApiError(401)"  # the loop ended on an error
        code, text = _get(server.port, "/healthz")
        assert code == 503 and "ApiError(401)" in text
        state.update(leader=False, error="")
        assert "gpufleet_controller_leader 0.0" in _get(server.port, "/metrics")[1]
        assert _get(server.port, "/nope")[0] == 404
    finally:
        server.stop()


def test_a_port_that_is_taken_is_an_os_error() -> None:
    health = ControllerHealth(dict, stale_s=60)
    first = HealthServer(health, 0, host="127.0.0.1").start()
    try:
        with pytest.raises(OSError):
            HealthServer(health, first.port, host="127.0.0.1")
    finally:
        first.stop()


def test_a_failed_action_is_a_json_line_on_stderr_and_the_memory_is_bounded(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from gpufleet.adapters.kubernetes import act as act_mod

    monkeypatch.setattr(act_mod, "AUDIT_KEEP", 3)
    act = act_mod.Actuator(None, dry_run=False)  # type: ignore[arg-type]  # records only: no API server here
    seen: list[str] = []
    act.on_record = lambda ev: seen.append(ev["outcome"])
    act.record("bind", "ns/p", "fit", "applied")
    act.record("inventory_sync", "prod", "store_unavailable", "failed", error="OperationalError: down")
    (line,) = capsys.readouterr().err.splitlines()  # the applied bind is not logged, the failure is
    assert json.loads(line) | {"at_s": 0} == {"action": "inventory_sync", "target": "prod", "at_s": 0,
                                              "reason": "store_unavailable", "outcome": "failed", "dry_run": False,
                                              "error": "OperationalError: down"}  # fmt: skip
    for i in range(5):
        act.record("bind", f"ns/q{i}", "fit", "applied")
    assert [a["target"] for a in act.audit] == ["ns/q2", "ns/q3", "ns/q4"] and len(seen) == 7


def test_the_eviction_version_is_the_newest_the_policy_group_serves() -> None:
    from gpufleet.adapters.kubernetes.act import eviction_api_version

    v120 = {
        "kind": "APIGroup",
        "name": "policy",
        "versions": [{"groupVersion": "policy/v1beta1", "version": "v1beta1"}],
    }
    v125 = {"kind": "APIGroup", "name": "policy", "versions": [{"groupVersion": "policy/v1", "version": "v1"},
                                                               {"groupVersion": "policy/v1beta1", "version": "v1beta1"}]}  # fmt: skip
    assert eviction_api_version(v120) == "policy/v1beta1" and eviction_api_version(v125) == "policy/v1"
    assert eviction_api_version({}) == "policy/v1beta1"
