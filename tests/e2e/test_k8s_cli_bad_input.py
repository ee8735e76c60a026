"""Kubernetes commands on bad input: one clear line, exit 2, no traceback; their options reach the controller's
config and the replay's planner (the loop's replica spread). No API server needed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from gpufleet.adapters.kubernetes import controller as controller_mod
from gpufleet.adapters.kubernetes.controller import ControllerConfig, loop_replica_spread
from gpufleet.adapters.kubernetes.export import to_json
from gpufleet.adapters.kubernetes.rest import Kube, KubeConfig
from gpufleet.adapters.kubernetes.workloads import DEFAULT_QUEUE_QUERY, DEFAULT_RUNNING_QUERY
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.cli import cmd_controller
from gpufleet.cli.main import app
from gpufleet.control import binding
from gpufleet.control.binding import BindingPlan
from gpufleet.control.binding_spread import REASON_SPREAD
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.schedule.table import NodeSpec, PodRequest
from tests.e2e.inprocess import run_main


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it (a subprocess: the controller's first and store-down tests, k8s sync's); the
    other bad inputs run ``main()`` in-process (tests/e2e/inprocess.py: the same exit code and stderr, ~1.5 s of CPU
    less each)."""
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


def test_controller_refuses_a_health_port_out_of_range(tmp_path: Path) -> None:
    r = run_main("controller", "--kubeconfig", str(tmp_path / "k"), "--health-port", "70000")
    assert r.returncode == 2 and "--health-port" in r.stderr and "Traceback" not in r.stderr


def test_controller_rejects_a_zero_preemption_budget(tmp_path: Path) -> None:
    r = run_main(
        "controller", "--kubeconfig", str(tmp_path / "k"), "--no-preemption", "--max-preemptions-per-tick", "0"
    )
    assert r.returncode == 2 and "--max-preemptions-per-tick" in r.stderr and "Traceback" not in r.stderr


def test_controller_rejects_a_negative_eviction_grace_or_checkpoint_wait(tmp_path: Path) -> None:
    k = str(tmp_path / "k")
    for opt, value in (("--eviction-grace-s", "-1"), ("--eviction-grace-s", "soon"), ("--checkpoint-timeout-s", "-5")):
        r = run_main("controller", "--kubeconfig", k, opt, value)
        assert r.returncode == 2 and opt in r.stderr and "Traceback" not in r.stderr, (opt, value, r.stderr)


def test_controller_usage_metering_needs_the_store(tmp_path: Path) -> None:
    k = str(tmp_path / "k")
    r = run_main("controller", "--kubeconfig", k, "--meter-every-s", "30", "--prometheus", "http://127.0.0.1:1")
    assert r.returncode == 2 and "--db/--cluster" in r.stderr and "Traceback" not in r.stderr
    r = run_main("controller", "--kubeconfig", k, "--node-limits-every-s", "300")
    assert r.returncode == 2 and "--db/--cluster" in r.stderr and "NodePool limits" in r.stderr
    r = run_main("controller", "--kubeconfig", k, "--meter-every-s", "-1")
    assert r.returncode == 2 and "--meter-every-s" in r.stderr and "Traceback" not in r.stderr


def test_controller_usage_metering_reaches_the_config_with_a_sink(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cmd_controller, "connect", lambda *a, **k: Kube(KubeConfig(server="http://127.0.0.1:1")))
    monkeypatch.setattr(controller_mod, "Controller", _Ctl)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    _Ctl.configs.clear()
    _Ctl.sinks.clear()
    db = _store_with_cluster(tmp_path)
    flags = ["--db", db, "--cluster", "c", "--prometheus", "http://127.0.0.1:1", "--meter-every-s", "30"]
    r = CliRunner().invoke(app, ["controller", "--in-cluster", *flags])
    assert r.exit_code == 0, r.output
    assert [c.meter_every_s for c in _Ctl.configs] == [30.0] and callable(_Ctl.sinks[0])
    r = CliRunner().invoke(app, ["controller", "--in-cluster", "--dry-run"])
    assert r.exit_code == 0 and _Ctl.configs[-1].meter_every_s == 0 and _Ctl.sinks[-1] is None
    # with --cluster the store's URL defaults to GPUFLEET_DB_URL (the Secret's env var in the store-linked overlay)
    monkeypatch.setenv("GPUFLEET_DB_URL", db)
    r = CliRunner().invoke(app, ["controller", "--in-cluster", "--cluster", "c", "--meter-every-s", "30"])
    assert r.exit_code == 0, r.output
    assert (_Ctl.configs[-1].store_url, _Ctl.configs[-1].inventory_cluster) == (db, "c")
    monkeypatch.delenv("GPUFLEET_DB_URL")
    r = CliRunner().invoke(app, ["controller", "--in-cluster", "--cluster", "c"])
    assert r.exit_code == 2 and "--db/--cluster" in r.output
    # without Prometheus the meter runs too (its records' utilization not measured)
    r = CliRunner().invoke(app, ["controller", "--in-cluster", "--db", db, "--cluster", "c", "--meter-every-s", "30"])
    assert r.exit_code == 0, r.output
    assert _Ctl.configs[-1].meter_every_s == 30.0 and _Ctl.configs[-1].prometheus_url == "" and callable(_Ctl.sinks[-1])
    # a GPU product the name tokens do not map: --sku names its SKU for the sync and the meter alike
    r = CliRunner().invoke(app, ["controller", "--in-cluster", *flags, "--sku", "NVIDIA-H200=h200_141gb"])
    assert r.exit_code == 0, r.output
    assert _Ctl.configs[-1].sku_map == (("NVIDIA-H200", "h200_141gb"),)


def _store_with_cluster(tmp_path: Path) -> str:
    """A migrated SQLite store with cluster ``c`` registered."""
    db = f"sqlite:///{tmp_path / 'x.db'}"
    engine = make_engine(db)
    migrate.upgrade(engine)
    with engine.begin() as c:
        c.execute(text("insert into clusters (id, name, region_id) values ('c', 'c', 'us-east-1')"))
    engine.dispose()
    return db


def test_controller_starts_when_the_store_does_not_answer(tmp_path: Path) -> None:
    """A store that is down at start is a warning, not an exit: binding must not wait for it (its syncs and metered
    hours are retried). Here the run then stops at the next step, the API server, which is not there either."""
    kubeconfig = tmp_path / "k"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    down = "postgresql+psycopg://gpufleet@127.0.0.1:1/nowhere"
    r = _run("controller", "--kubeconfig", str(kubeconfig), "--db", down, "--cluster", "c", "--meter-every-s", "30")
    assert "warning: the store does not answer" in r.stderr and "retried" in r.stderr, r.stderr
    assert r.returncode == 2 and "--kubeconfig" in r.stderr and "Traceback" not in r.stderr  # it went on to connect


def test_controller_refuses_a_cluster_the_store_does_not_have(tmp_path: Path) -> None:
    db = _store_with_cluster(tmp_path)
    r = run_main("controller", "--kubeconfig", str(tmp_path / "k"), "--db", db, "--cluster", "prod-9")
    assert r.returncode == 2 and "--cluster" in r.stderr and "'prod-9' is not in the store" in r.stderr
    assert "POST /v1/clusters" in r.stderr and "Traceback" not in r.stderr


def test_controller_sku_options_are_checked_against_the_store(tmp_path: Path) -> None:
    db = _store_with_cluster(tmp_path)
    k = str(tmp_path / "k")
    r = run_main("controller", "--kubeconfig", k, "--db", db, "--cluster", "c", "--sku", "NVIDIA-H200=h201_nope")
    assert r.returncode == 2 and "--sku" in r.stderr and "h201_nope" in r.stderr and "Traceback" not in r.stderr
    r = run_main("controller", "--kubeconfig", k, "--sku", "nonsense")
    assert r.returncode == 2 and "PRODUCT=SKU_ID" in r.stderr and "Traceback" not in r.stderr


def test_controller_replica_spread_flag_takes_no_value(tmp_path: Path) -> None:
    r = run_main("controller", "--kubeconfig", str(tmp_path / "k"), "--no-replica-spread=yes")
    assert r.returncode == 2 and "does not take a value" in r.stderr and "Traceback" not in r.stderr
    r = run_main("controller", "--kubeconfig", str(tmp_path / "k"), "--no-replica-spreads")
    assert r.returncode == 2 and "No such option" in r.stderr and "--no-replica-spread," in r.stderr  # the options
    r = run_main("controller", "--kubeconfig", str(tmp_path / "missing"), "--no-replica-spread")
    assert r.returncode == 2 and "file not found" in r.stderr  # the option parsed; the config is what fails


class _Ctl:
    """Stands in for the Controller: records its config, runs no loop."""

    configs: ClassVar[list[ControllerConfig]] = []
    sinks: ClassVar[list[object]] = []

    def __init__(self, kube: Kube, cfg: ControllerConfig, *, usage_sink: object = None) -> None:
        self.configs.append(cfg)
        self.sinks.append(usage_sink)
        self.identity = "test"
        self.act = type("Act", (), {"audit": []})()

    def start(self) -> _Ctl:
        return self

    def run(self) -> None:
        return None

    def stop(self) -> None:
        return None


@pytest.mark.parametrize(("flags", "spread"), [((), loop_replica_spread()), (("--no-replica-spread",), None)])
def test_controller_replica_spread_option_sets_the_config(
    monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], spread: object
) -> None:
    assert spread is None or spread == ControllerConfig().replica_spread  # the default is the loop's spread
    monkeypatch.setattr(cmd_controller, "connect", lambda *a, **k: Kube(KubeConfig(server="http://127.0.0.1:1")))
    monkeypatch.setattr(controller_mod, "Controller", _Ctl)
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # leave pytest's handlers alone
    _Ctl.configs.clear()
    r = CliRunner().invoke(app, ["controller", "--in-cluster", "--dry-run", *flags])
    assert r.exit_code == 0, r.output
    assert [c.replica_spread for c in _Ctl.configs] == [spread]


@pytest.mark.parametrize(
    ("flags", "queries"),
    [
        ((), (DEFAULT_QUEUE_QUERY, DEFAULT_RUNNING_QUERY, "", 86_400.0, 15.0)),
        (
            (
                "--queue-query",
                "sum(q)",
                "--running-query",
                "OFF",
                "--slo-miss-query",
                "sum(m)",
                "--scale-history-s",
                "0",
                "--react-every-s",
                "0",
            ),
            ("sum(q)", "", "sum(m)", 0.0, 0.0),
        ),
    ],
)
def test_controller_gauge_queries_reach_the_config(
    monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], queries: tuple[str, str, str, float, float]
) -> None:
    monkeypatch.setattr(cmd_controller, "connect", lambda *a, **k: Kube(KubeConfig(server="http://127.0.0.1:1")))
    monkeypatch.setattr(controller_mod, "Controller", _Ctl)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    _Ctl.configs.clear()
    r = CliRunner().invoke(app, ["controller", "--in-cluster", "--dry-run", *flags])
    assert r.exit_code == 0, r.output
    got = [(c.queue_query, c.running_query, c.slo_miss_query, c.scale_history_s, c.react_every_s) for c in _Ctl.configs]
    assert got == [queries]  # fmt: skip


def test_k8s_replay_spreads_replicas_with_the_loops_spread(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    nodes = tuple(ObservedNode(NodeSpec(f"n{i}", 64_000, 512 * 1024, 8, "H100"), sku="H100") for i in range(4))
    pods = tuple(
        ObservedPod(
            PodRequest(f"ns/web-{i}", 1000, 1024, 1, 1000),
            "ns",
            f"web-{i}",
            f"uid-{i}",
            "Pending",
            scheduler_name="gpufleet",
            kind="serving",
            owner_kind="ReplicaSet",
            owner_name="web-5d8f",  # a replica of Deployment web
            created="2026-01-01T00:00:00Z",
        )
        for i in range(8)
    )
    export = tmp_path / "cluster.json"
    export.write_text(json.dumps(to_json(Observation(0.0, nodes, pods))))
    made: list[tuple[binding.BindingPlanner, BindingPlan]] = []
    real = binding.BindingPlanner

    class Recording:  # wraps the planner (a compiled class with the native build: not subclassed from Python)
        def __init__(self, *args: Any, **kw: Any) -> None:
            self.inner = real(*args, **kw)

        def plan(self, obs: Observation, *args: Any, **kw: Any) -> BindingPlan:
            out = self.inner.plan(obs, *args, **kw)
            made.append((self.inner, out))
            return out

        def unallocated_gpu_milli(self) -> int:
            return self.inner.unallocated_gpu_milli()

    monkeypatch.setattr(binding, "BindingPlanner", Recording)
    r = CliRunner().invoke(app, ["k8s", "replay", str(export)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["binds"] == 8
    [(planner, plan)] = made
    assert planner.spread is not None and planner.spread == loop_replica_spread()
    assert sorted(Counter(b.node for b in plan.binds).values()) == [2, 2, 2, 2]  # cap = ceil(0.25 * 8)
    assert any(b.reason == REASON_SPREAD for b in plan.binds)
