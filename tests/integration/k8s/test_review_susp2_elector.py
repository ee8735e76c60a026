"""Review (susp2): the controller's Lease elector and the end of ``Controller.run`` against the real API server.

The elector thread (``Controller._elect``) must outlive an error its Lease client raises that the adapter does not
wrap in ApiError, and ``/healthz`` must say so while it keeps failing; an error ending ``Controller.run`` must end
``gpufleet controller`` with one line on stderr and a non-zero exit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.health import HealthServer
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.schedule.table import PodRequest
from tests.integration.k8s.helpers import create_pod, pod_body, wait_for


class FaultyLeaseClient:
    """The elector's Lease client with a fault injected at the seam: its next ``fails`` GETs (None: all of them)
    raise an error the REST adapter does not wrap in ApiError; everything else goes to the real API server."""

    def __init__(self, kube: Kube, fails: int | None) -> None:
        self.kube = kube
        self.fails = fails
        self.raised = 0

    def get(self, path: str, **query: Any) -> Any:
        if self.fails is None or self.fails > 0:
            if self.fails is not None:
                self.fails -= 1
            self.raised += 1
            raise RuntimeError("injected: an error the Lease client does not wrap")
        return self.kube.get(path, **query)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)


def _cfg(ns: str, **kw: Any) -> ControllerConfig:
    base: dict[str, Any] = dict(scheduler_name=f"gpufleet-{uuid.uuid4().hex[:6]}", namespace=ns,
                                lease_name=f"l-{uuid.uuid4().hex[:6]}", identity="susp2", lease_duration_s=4,
                                renew_s=0.2, tick_s=0.05, replica_spread=None)  # fmt: skip
    return ControllerConfig(**(base | kw))


def _healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _holder(kube: Kube, ns: str, name: str) -> str:
    try:
        return str(kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}")["spec"]["holderIdentity"])
    except Exception:
        return ""


def test_the_elector_survives_an_unexpected_error_and_takes_the_lease(kube: Kube, ns: str) -> None:
    """Review (fixed), the defect: ``_elect`` calls ``try_acquire_or_renew`` with no guard; the round catches only ApiError, so one
    other error (a client bug, a garbled answer, an SSL library error that escapes urllib3's wrapping) ends the
    elector's daemon thread silently. The loop keeps turning as a follower forever: the Lease is never taken. Now the
    round's error is recorded and retried after a backoff."""
    cfg = _cfg(ns)
    ctl = Controller(kube, cfg).start()
    faulty = FaultyLeaseClient(kube, fails=1)
    ctl.elector.kube = faulty  # type: ignore[assignment]
    t = threading.Thread(target=ctl.run, daemon=True)
    t.start()
    try:
        assert wait_for(lambda: faulty.raised == 1, 10)
        assert wait_for(ctl.leading, 10), "one unexpected error and the controller never leads again"
        assert _holder(kube, ns, cfg.lease_name) == "susp2"
    finally:
        ctl.stop()
        t.join(timeout=30)
    assert not t.is_alive()


def test_healthz_fails_while_the_elector_keeps_failing(kube: Kube, ns: str) -> None:
    """Review (fixed), the defect: /healthz looks only at the binding loop's last turn, which a follower's loop keeps doing; with the
    elector dead (or failing on every round) the replica answers 200 for good and the kubelet never restarts it. Now 503 naming the error once the elector has
    failed for longer than ``health_stale_s``."""
    cfg = _cfg(ns, health_stale_s=1.0)
    ctl = Controller(kube, cfg).start()
    ctl.health_server = HealthServer(ctl.health, 0, host="127.0.0.1").start()
    port = ctl.health_server.port
    faulty = FaultyLeaseClient(kube, fails=None)
    ctl.elector.kube = faulty  # type: ignore[assignment]
    t = threading.Thread(target=ctl.run, daemon=True)
    t.start()
    try:
        assert wait_for(lambda: faulty.raised >= 1, 10)
        assert wait_for(lambda: _healthz(port)[0] == 503, 10), _healthz(port)
        code, text = _healthz(port)
        assert code == 503 and "Lease" in text and "RuntimeError" in text, text
        assert not ctl.leading()
    finally:
        ctl.stop()
        t.join(timeout=30)
    assert not t.is_alive()


def test_an_error_ending_the_run_exits_with_one_line(
    kube: Kube, kubelet: FakeKubelet, ns: str, kubeconfig: Path, tmp_path: Path
) -> None:
    """Review (fixed), the defect: an error ending ``Controller.run`` (here the audit file replaced by a directory while the leader
    runs, so writing the next bind's record raises IsADirectoryError) was re-raised after ``finally`` joined the
    elector thread, which loops until ``stop()``: the leader hung for good, holding the Lease. And with the join
    passed, ``user_errors`` catches only GpufleetError: the CLI ended on a traceback. Now run() stops the elector
    before joining it (the Lease is released) and the CLI prints one ``error:`` line and exits 1."""
    prefix = f"e{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(f"{prefix}-0", gpus=8)])
    kubelet.start()
    sched = f"gpufleet-{prefix}"
    audit = tmp_path / "audit.jsonl"
    cmd = [sys.executable, "-m", "gpufleet", "controller", "--kubeconfig", str(kubeconfig), "--scheduler-name", sched,
           "--lease-namespace", ns, "--lease-name", f"l-{prefix}", "--lease-duration-s", "5", "--identity", "e",
           "--audit", str(audit), "--no-replica-spread"]  # fmt: skip
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ | {"PYTHONUNBUFFERED": "1"}
    )
    try:
        assert wait_for(lambda: _holder(kube, ns, f"l-{prefix}") == "e", 60)
        create_pod(kube, ns, pod_body("first", PodRequest("x", 1000, 1024, 1, 1000), sched))
        assert wait_for(lambda: audit.is_file() and "first" in audit.read_text(), 30)
        audit.unlink()
        audit.mkdir()  # the audit path is now a directory: the next record cannot be appended
        create_pod(kube, ns, pod_body("second", PodRequest("x", 1000, 1024, 1, 1000), sched))
        try:
            _out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the controller hung after its loop ended on an error")
        text = err.decode()
        assert p.returncode not in (0, None), text
        assert "Traceback" not in text, text
        lines = [x for x in text.splitlines() if x.startswith("error:")]
        assert len(lines) == 1 and "IsADirectoryError" in lines[0], text
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(audit, ignore_errors=True)
