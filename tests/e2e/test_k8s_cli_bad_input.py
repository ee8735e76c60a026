"""Kubernetes commands on bad input: one clear line, exit 2, no traceback (no API server needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args], check=False, capture_output=True, text=True, timeout=120
    )


def test_controller_without_config_or_with_a_broken_one(tmp_path: Path) -> None:
    r = _run("controller")
    assert r.returncode == 2 and "--kubeconfig" in r.stderr and "Traceback" not in r.stderr
    r = _run("controller", "--kubeconfig", str(tmp_path / "missing"))
    assert r.returncode == 2 and "file not found" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "kubeconfig"
    bad.write_text("clusters: [oops\n")
    r = _run("controller", "--kubeconfig", str(bad))
    assert r.returncode == 2 and "cannot load Kubernetes config" in r.stderr and "Traceback" not in r.stderr
    dead = tmp_path / "dead"
    dead.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    r = _run("controller", "--kubeconfig", str(dead))
    assert r.returncode == 2 and "unreachable" in r.stderr and "Traceback" not in r.stderr


def test_k8s_sync_rejects_a_malformed_sku_pair(tmp_path: Path) -> None:
    r = _run("k8s", "sync", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--cluster", "c", "--sku", "nonsense")
    assert r.returncode == 2 and "PRODUCT=SKU_ID" in r.stderr and "Traceback" not in r.stderr


def test_controller_rejects_a_zero_preemption_budget(tmp_path: Path) -> None:
    r = _run("controller", "--kubeconfig", str(tmp_path / "k"), "--no-preemption", "--max-preemptions-per-tick", "0")
    assert r.returncode == 2 and "--max-preemptions-per-tick" in r.stderr and "Traceback" not in r.stderr
