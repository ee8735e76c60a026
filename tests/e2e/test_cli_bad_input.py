"""Bad input on every file-reading or option-taking command: exit 2 and one line that names the field and the
file (and line), never a traceback. Each case below was a traceback, a hang or a silent success before.

The table runs the Typer app in-process (the same parsing and error printing as the command line); a few cases
also run as a user does, ``python -m gpufleet`` in a subprocess, to check the exit code and stderr end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
SERIES = "timestamp,series_id,value\n"
CAP = "id,pool_id,tier,sku_id,gpus,start,end,price_usd_per_gpu_h\n"
ALLOC = "id,workload_id,team_id,tenant_id,namespace,feature,pool_id,sku_id,gpus,start,end\n"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
NODES = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
DAY0 = "2024-01-01T00:00:00Z"


def _hours(n: int, value: str = "100", sid: str = "a") -> str:
    return "".join(f"2024-01-{1 + h // 24:02d}T{h % 24:02d}:00:00Z,{sid},{value}\n" for h in range(n))


def _files(d: Path) -> dict[str, Path]:
    """Small bad (and a few good) input files."""
    text = {
        "ok.csv": SERIES + _hours(72),
        "inf.csv": SERIES + _hours(5) + "2024-01-01T05:00:00Z,a,inf\n",
        "neg.csv": SERIES + _hours(72, "-5"),
        "stray.csv": SERIES + _hours(5) + "9999-01-01T00:00:00Z,a,1\n",
        "azure_ok.csv": AZURE + "".join(f"2023-11-16 18:00:{s:02d},100,20\n" for s in range(30)),
        "cap.csv": CAP + f"c1,p1,on_demand,h100_80gb,8,{DAY0},2024-01-02T00:00:00Z,2.5\n",
        "cap_nan.csv": CAP + f"c1,p1,on_demand,h100_80gb,8,{DAY0},2024-01-02T00:00:00Z,nan\n",
        "cap_inf_end.csv": CAP + f"c1,p1,on_demand,h100_80gb,8,{DAY0},inf,2.5\n",
        "cap_gpus.csv": CAP + f"c1,p1,on_demand,h100_80gb,99999999999999999999,{DAY0},2024-01-02T00:00:00Z,2.5\n",
        "alloc.csv": ALLOC + f"a1,w1,t1,ten,ns,f,p1,h100_80gb,4,{DAY0},2024-01-01T12:00:00Z\n",
        "prom.json": '{"data": {"resultType": "matrix", "result": [{"metric": {}, "values": [["x", "y"]]}]}}',
        "prom2.json": '{"data": {"resultType": "matrix", "result": "oops"}}',
        "nodes.csv": NODES + "n1,96000,786432,8,V100M16\n",
        "nodes0.csv": NODES + "n1,96000,786432,0,V100M16\n",
        "nodes_inf.csv": NODES + "n1,inf,786432,8,V100M16\n",
        "region.csv": SERIES + _hours(48, sid="h100_80gb@us-east-1") + _hours(48, sid="h100_80gb@us-esat-1"),
        "pods.csv": PODS + "p1,8000,30000,1,500\n",
        "pods0.csv": PODS + "p1,1,1,0,0\n",
        "scen_inf.yaml": "name: x\nseed: 1\npools:\n- sku: h100_80gb\n  region: us-east-1\n  on_demand_quota_gpus: .inf\n",
    }
    out = {name: d / name for name in text}
    for name, body in text.items():
        out[name].write_text(body)
    out["latin1.csv"] = d / "latin1.csv"
    out["latin1.csv"].write_bytes((SERIES + _hours(3, sid="caf\xe9")).encode("latin-1"))
    out["dir"] = d / "folder.csv"
    out["dir"].mkdir()
    return out


def _cb(f: dict[str, Path], cap: str = "cap.csv", alloc: str = "alloc.csv", *extra: str) -> list[str]:
    return ["cost", "chargeback", "--capacity", str(f[cap]), "--allocations", str(f[alloc]),
            "--from", DAY0, "--to", "2024-01-02T00:00:00Z", *extra]  # fmt: skip


Case = tuple[Callable[[dict[str, Path]], list[str]], tuple[str, ...]]
CASES: dict[str, Case] = {
    "forecast: a directory": (lambda f: ["forecast", "--series", str(f["dir"]), "--horizon", "3"], ("is a directory",)),
    "forecast: latin-1 bytes": (
        lambda f: ["forecast", "--series", str(f["latin1.csv"]), "--horizon", "3"],
        ("latin1.csv:2", "UTF-8"),
    ),
    "forecast: inf value": (
        lambda f: ["forecast", "--series", str(f["inf.csv"]), "--horizon", "3"],
        ("inf.csv:7", "finite"),
    ),
    "forecast: negative demand names the file, line and series": (
        lambda f: ["forecast", "--series", str(f["neg.csv"]), "--horizon", "3"],
        ("neg.csv:2", "value", "series 'a'", "demand must be >= 0, got '-5'"),
    ),
    "bench forecast: negative demand is refused as forecast refuses it (was accepted)": (
        lambda f: ["bench", "forecast", "--series", str(f["neg.csv"]), "--horizon", "3"],
        ("neg.csv:2", "value", "series 'a'", "demand must be >= 0, got '-5'"),
    ),
    "forecast: stray timestamp": (
        lambda f: ["forecast", "--series", str(f["stray.csv"]), "--horizon", "3"],
        ("stray",),
    ),
    "forecast: horizon beyond memory": (
        lambda f: ["forecast", "--series", str(f["ok.csv"]), "--horizon", "100000000"],
        ("horizon", "1..100,000"),
    ),
    "forecast: --aggregate finer than the data": (
        lambda f: ["forecast", "--series", str(f["ok.csv"]), "--horizon", "3", "--aggregate", "30min"],
        ("ok.csv", "aggregate", "finer"),
    ),
    "forecast: --json is a directory": (
        lambda f: ["forecast", "--series", str(f["ok.csv"]), "--horizon", "3", "--json", str(f["dir"])],
        ("--json",),
    ),
    "bench forecast: unknown model": (
        lambda f: ["bench", "forecast", "--series", str(f["ok.csv"]), "--horizon", "3", "--models", "bogus"],
        ("models", "bogus"),
    ),
    "bench procure: --rps-per-replica 0": (
        lambda f: ["bench", "procure", "--demand", str(f["ok.csv"]), "--rps-per-replica", "0"],
        ("rps_per_replica",),
    ),
    "bench procure: NaN quota": (
        lambda f: ["bench", "procure", "--demand", str(f["ok.csv"]), "--on-demand-quota", "nan"],
        ("on_demand_quota_gpus",),
    ),
    "bench procure: a directory": (lambda f: ["bench", "procure", "--demand", str(f["dir"])], ("is a directory",)),
    "plan: horizon past the API's bound": (lambda f: ["plan", "--horizon", "99999d"], ("horizon", "730")),
    "plan: unknown region in sku@region (was a plan for pools that exist nowhere)": (
        lambda f: ["plan", "--history", str(f["region.csv"]), "--horizon", "30d"],
        ("region.csv:50", "series_id", "unknown region 'us-esat-1' in 'h100_80gb@us-esat-1'", "known: us-east-1,"),
    ),
    "plan: negative quota": (lambda f: ["plan", "--on-demand-quota", "-1"], ("on_demand_quota_gpus",)),
    "bench autoscale: NaN cold start": (
        lambda f: ["bench", "autoscale", "--trace", str(f["azure_ok.csv"]), "--cold-start-s", "nan"],
        ("cold_start_s",),
    ),
    "bench autoscale: infinite SLO": (
        lambda f: ["bench", "autoscale", "--trace", str(f["azure_ok.csv"]), "--slo-s", "inf"],
        ("slo_s",),
    ),
    "bench autoscale: negative warm start": (
        lambda f: ["bench", "autoscale", "--trace", str(f["azure_ok.csv"]), "--warm-start-min", "-5"],
        ("warm_start_min",),
    ),
    "bench autoscale: a negative request rate names its line (the series loader's check)": (
        lambda f: ["bench", "autoscale", "--trace", str(f["neg.csv"]), "--no-oracle"],
        ("neg.csv:2", "value", "series 'a'", "must be >= 0, got '-5'"),
    ),
    "bench autoscale: stray timestamp": (
        lambda f: ["bench", "autoscale", "--trace", str(f["stray.csv"]), "--no-oracle"],
        ("stray",),
    ),
    "bench binpack: no GPU in the nodes": (
        lambda f: ["bench", "binpack", "--nodes", str(f["nodes0.csv"]), "--pods", str(f["pods.csv"]), "--seeds", "1"],
        ("nodes0.csv", "no node has a GPU"),
    ),
    "bench binpack: no pod wants a GPU (was a hang)": (
        lambda f: ["bench", "binpack", "--nodes", str(f["nodes.csv"]), "--pods", str(f["pods0.csv"]), "--seeds", "1"],
        ("pods0.csv", "no pod requests a GPU"),
    ),
    "bench binpack: inf cpu": (
        lambda f: [
            "bench",
            "binpack",
            "--nodes",
            str(f["nodes_inf.csv"]),
            "--pods",
            str(f["pods.csv"]),
            "--seeds",
            "1",
        ],
        ("nodes_inf.csv:2", "cpu_milli"),
    ),
    "bench loop: empty seeds": (lambda f: ["bench", "loop", "--seeds", ""], ("--seeds",)),
    "bench loop: days past ten years": (lambda f: ["bench", "loop", "--days", "5000"], ("days", "3650")),
    "bench cluster-autoscale: reversed seeds": (
        lambda f: ["bench", "cluster-autoscale", "--seeds", "5-1"],
        ("--seeds",),
    ),
    "bench forecast-scale: zero series": (lambda f: ["bench", "forecast-scale", "--n-series", "0"], ("--n-series",)),
    "bench portfolio: zero days": (lambda f: ["bench", "portfolio", "--days", "0"], ("--days",)),
    "bench sched-throughput: negative seed": (lambda f: ["bench", "sched-throughput", "--seed", "-1"], ("--seed",)),
    "serve: unknown --log-level": (lambda f: ["serve", "--log-level", "bogus"], ("--log-level", "bogus")),
    "reconcile: zero --interval-s": (lambda f: ["reconcile", "--interval-s", "0"], ("--interval-s",)),
    "reconcile: negative --passes": (lambda f: ["reconcile", "--passes", "-1"], ("--passes",)),
    "bench api: not a PostgreSQL URL": (lambda f: ["bench", "api", "--pg-url", "notaurl"], ("pg_url",)),
    "bench api: zero processes": (lambda f: ["bench", "api", "--processes", "0"], ("processes",)),
    "simulate: infinite quota in the scenario": (
        lambda f: ["simulate", "--scenario", str(f["scen_inf.yaml"]), "--dump"],
        ("scen_inf.yaml:6", "finite"),
    ),
    "simulate: --days past ten years": (lambda f: ["simulate", "--days", "100000000", "--dump"], ("--days", "3650")),
    "simulate: unknown scenario name": (
        lambda f: ["simulate", "--scenario", "bogus", "--dump"],
        ("--scenario", "bogus", "does not exist"),
    ),
    "chargeback: NaN price": (lambda f: _cb(f, "cap_nan.csv"), ("cap_nan.csv:2", "price_usd_per_gpu_h")),
    "chargeback: infinite end": (lambda f: _cb(f, "cap_inf_end.csv"), ("cap_inf_end.csv:2", "timestamp")),
    "chargeback: absurd GPU count": (lambda f: _cb(f, "cap_gpus.csv"), ("cap_gpus.csv:2", "gpus")),
    "chargeback: latin-1 allocations": (lambda f: _cb(f, "cap.csv", "latin1.csv"), ("latin1.csv:2", "UTF-8")),
    "chargeback: --to inf": (lambda f: [*_cb(f)[:-4], "--from", "0", "--to", "inf"], ("--to", "timestamp")),
    "chargeback: malformed Prometheus values": (
        lambda f: _cb(f, "cap.csv", "alloc.csv", "--telemetry", str(f["prom.json"])),
        ("prom.json", "values"),
    ),
    "chargeback: Prometheus result not a list": (
        lambda f: _cb(f, "cap.csv", "alloc.csv", "--telemetry", str(f["prom2.json"])),
        ("prom2.json", "data.result"),
    ),
    "chargeback: --csv is a directory": (lambda f: _cb(f, "cap.csv", "alloc.csv", "--csv", str(f["dir"])), ("--csv",)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_clear_line_and_exit_2(name: str, tmp_path: Path) -> None:
    args, expected = CASES[name]
    res = runner.invoke(app, args(_files(tmp_path)))
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())  # rich boxes wrap long usage errors
    assert "Traceback" not in text
    for part in expected:
        assert part in text.replace("│ ", ""), text


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_as_a_user_runs_it_latin1_and_a_directory_are_one_line_on_stderr(tmp_path: Path) -> None:
    f = _files(tmp_path)
    for args, where in (
        (["forecast", "--series", str(f["latin1.csv"]), "--horizon", "3"], f"{f['latin1.csv']}:2"),
        (["bench", "binpack", "--nodes", str(f["dir"]), "--pods", str(f["pods.csv"])], str(f["dir"])),
    ):
        r = _run(*args)
        assert r.returncode == 2, r.stderr
        assert "Traceback" not in r.stderr + r.stdout
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and where in lines[0], r.stderr


def test_as_a_user_runs_it_a_database_that_cannot_be_opened(tmp_path: Path) -> None:
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("my notes\n")
    for url, why in (
        (f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}", "unable to open database file"),
        (f"sqlite:///{not_a_db}", "file is not a database"),
    ):
        r = _run("db", "upgrade", "--db", url)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"cannot open database {url}: {why}" in r.stderr
    assert not_a_db.read_text() == "my notes\n"  # the failed upgrade wrote nothing into the file


def test_an_unknown_revision_is_refused_before_the_schema_is_touched(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0
    made = runner.invoke(app, ["token", "create", "--role", "viewer", "--user", "vic", "--db", url])
    assert made.exit_code == 0, made.output
    res = runner.invoke(app, ["db", "upgrade", "--db", url, "--revision", "bogus"])
    assert res.exit_code == 2 and "revision: Can't locate revision identified by 'bogus'" in res.output
    listed = runner.invoke(app, ["token", "list", "--db", url])
    assert listed.exit_code == 0 and "vic" in listed.output  # the store is intact and still at head


def test_a_bad_environment_variable_is_named(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    res = runner.invoke(app, ["token", "list", "--db", url], env={"GPUFLEET_TOKEN_CACHE_S": "abc"})
    assert res.exit_code == 2 and "GPUFLEET_TOKEN_CACHE_S: Input should be a valid number" in res.output, res.output
    res = runner.invoke(app, ["serve", "--db", url, "--port", "70000"])
    assert res.exit_code == 2 and "error: port: " in res.output  # an option keeps its own name
    for var in ("GPUFLEET_AWS_REGIONS", "GPUFLEET_GCP_ZONES"):  # a list or map setting that is not JSON: no traceback
        res = runner.invoke(app, ["token", "list", "--db", url], env={var: "us-east-1"})
        assert res.exit_code == 2 and f"error: {var}: not valid JSON" in res.output, res.output


def test_as_a_user_runs_it_a_mistyped_sqlite_path_is_refused_and_no_empty_file_is_left(tmp_path: Path) -> None:
    made = tmp_path / "gpufleet.db"
    typo = tmp_path / "gpufleet.bd"
    assert _run("db", "upgrade", "--db", f"sqlite:///{made}").returncode == 0  # upgrade still creates a database
    for path in (typo, tmp_path / "nosuchdir" / "x.db"):
        url = f"sqlite:///{path}"
        for args in (["token", "create", "--role", "viewer", "--user", "vic"], ["serve", "--port", "58731"]):
            r = _run(*args, "--db", url)
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
            assert f"database {url} does not exist" in r.stderr, r.stderr
            assert f"run: gpufleet db upgrade --db '{url}'" in r.stderr, r.stderr
            assert not path.exists()  # was an empty .db file (or an "unable to open" error for a missing folder)
    assert not (tmp_path / "nosuchdir").exists()
    assert _run("token", "create", "--role", "viewer", "--user", "vic", "--db", f"sqlite:///{made}").returncode == 0


def test_as_a_user_runs_it_serve_on_azure_names_the_missing_setting(tmp_path: Path) -> None:
    """`serve --provider azure` stops at start, naming the setting: no subscription; no resource group; no credentials
    to be found (none in the environment, no Azure CLI); no credentials against Azure."""
    url = f"sqlite:///{tmp_path / 'z.db'}"
    assert _run("db", "upgrade", "--db", url).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "AZURE_", "MSI_", "IDENTITY_"))}
    env |= {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    sub = {"GPUFLEET_AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000001"}
    both = sub | {"GPUFLEET_AZURE_RESOURCE_GROUP": "gpu-fleet"}
    cases = (
        ({}, "error: azure_subscription_id: name the subscription"),
        (sub, "error: azure_resource_group: name the resource group"),
        (both, "error: azure_credentials: no Azure credentials here"),
        (both | {"GPUFLEET_AZURE_CREDENTIALS": "none"}, "'none' only with azure_endpoint_url"),
        (both | {"GPUFLEET_AZURE_REGIONS": "eastus"}, "error: GPUFLEET_AZURE_REGIONS"),
    )
    for extra, message in cases:
        r = subprocess.run([sys.executable, "-m", "gpufleet", "serve", "--db", url, "--provider", "azure", "--port",
                            "58733"], capture_output=True, text=True, timeout=120, check=False, env=env | extra)  # fmt: skip
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (extra, r.stderr)


def test_as_a_user_runs_it_serve_on_gcp_names_the_missing_setting(tmp_path: Path) -> None:
    """`serve --provider gcp` stops at start, naming the setting: no project; no credentials to be found (a key file
    that is not there; gcloud's and the metadata server's lookups kept out); no credentials against Google; a quota
    contact that is no email address; a Cloud Quotas endpoint that is no URL."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    assert _run("db", "upgrade", "--db", url).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "GOOGLE_", "CLOUDSDK_"))}
    env |= {"HOME": str(tmp_path), "NO_GCE_CHECK": "True"}
    cases = (
        ({}, "error: gcp_project: name the project"),
        ({"GPUFLEET_GCP_PROJECT": "p", "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "nokey.json")},
         "error: gcp_credentials: no Application Default Credentials"),
        ({"GPUFLEET_GCP_PROJECT": "p", "GPUFLEET_GCP_CREDENTIALS": "none"}, "'none' only with gcp_endpoint_url"),
        ({"GPUFLEET_GCP_PROJECT": "p", "GPUFLEET_GCP_QUOTA_CONTACT_EMAIL": "oncall"}, "error: GPUFLEET_GCP_QUOTA_CONTACT_EMAIL"),
        ({"GPUFLEET_GCP_PROJECT": "p", "GPUFLEET_GCP_QUOTAS_ENDPOINT_URL": "localhost:9"}, "GPUFLEET_GCP_QUOTAS_ENDPOINT_URL"),
    )  # fmt: skip
    for extra, message in cases:
        r = subprocess.run([sys.executable, "-m", "gpufleet", "serve", "--db", url, "--provider", "gcp", "--port",
                            "58732"], capture_output=True, text=True, timeout=120, check=False, env=env | extra)  # fmt: skip
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (extra, r.stderr)
