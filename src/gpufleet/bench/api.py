"""``gpufleet bench api``: latency and throughput of the control-plane API with PostgreSQL behind it.

The server is the real ``gpufleet serve`` (one uvicorn process) on a fresh PostgreSQL schema, seeded with a
fleet (the built-in catalog, active reservations, 56 days of hourly utilization for 12 workloads). Load comes
from a SECOND process on loopback, open loop: requests are scheduled at a fixed rate and latency is measured
from the scheduled send time, so a stalled server cannot hide its queueing (no coordinated omission).
Every phase is bounded in count and time. ``/healthz`` at the same rate is the floor (framework + loopback +
client), measured in the same run; a short closed-loop phase per endpoint measures saturation throughput.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.domain.errors import ValidationError

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BUDGET_TEAM = "team-0"
DAY_S = 86400


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    method: str
    path: str
    body: dict[str, Any] | None
    rate_per_s: float  # 0 = closed loop
    duration_s: float
    concurrency: int = 8


@dataclass(frozen=True, slots=True)
class PhaseResult:
    name: str
    mode: str
    target_rate_per_s: float
    sent: int
    ok: int
    errors: int
    duration_s: float
    throughput_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    server_cpu_ms_per_req: float | None


# ---- load generator (runs in the second process) ----------------------------------------------------------
class _Conn:
    """One keep-alive HTTP/1.1 connection. A minimal client keeps the load generator's own CPU cost low
    (httpx costs ~1 ms of CPU per request, which on a small shared machine would be measured as server time)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def request(self, raw: bytes) -> int:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        if length:
            await self.reader.readexactly(length)
        return status


class _Pool:
    def __init__(self, host: str, port: int, limit: int) -> None:
        self.host, self.port = host, port
        self.idle: list[_Conn] = []
        self.sem = asyncio.Semaphore(limit)

    async def request(self, raw: bytes) -> int:
        async with self.sem:
            reused = bool(self.idle)
            conn = self.idle.pop() if reused else await self._connect()
            try:
                status = await conn.request(raw)
            except (asyncio.IncompleteReadError, ConnectionResetError):
                conn.writer.close()
                if not reused:
                    raise
                # the server closed an idle keep-alive connection: resend once on a fresh one
                conn = await self._connect()
                status = await conn.request(raw)
            except Exception:
                conn.writer.close()
                raise
            self.idle.append(conn)
            return status

    async def _connect(self) -> _Conn:
        return _Conn(*await asyncio.open_connection(self.host, self.port))

    def close(self) -> None:
        for c in self.idle:
            c.writer.close()


class _Spread:
    """Round robin over the pools of several servers (``--processes``); the same interface as one pool."""

    def __init__(self, pools: list[_Pool]) -> None:
        self.pools = pools
        self.turn = 0

    async def request(self, raw: bytes) -> int:
        self.turn += 1
        return await self.pools[self.turn % len(self.pools)].request(raw)

    def close(self) -> None:
        for p in self.pools:
            p.close()


def _raw_request(phase: Phase, host: str, token: str) -> bytes:
    body = b"" if phase.body is None else json.dumps(phase.body).encode()
    head = (
        f"{phase.method} {phase.path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _open_loop(pool: _Pool | _Spread, phase: Phase, raw: bytes) -> tuple[list[float], int, float]:
    n = max(1, int(phase.rate_per_s * phase.duration_s))
    interval = 1.0 / phase.rate_per_s
    latencies: list[float] = []
    errors = 0
    t0 = time.perf_counter()

    async def one(scheduled: float) -> None:
        nonlocal errors
        try:
            status = await pool.request(raw)
            if status >= 400:
                errors += 1
                _ERRORS[str(status)] = _ERRORS.get(str(status), 0) + 1
        except Exception as exc:
            errors += 1
            _ERRORS[type(exc).__name__] = _ERRORS.get(type(exc).__name__, 0) + 1
        latencies.append(time.perf_counter() - scheduled)

    tasks = []
    for i in range(n):  # requests leave on schedule whether or not earlier ones have returned
        scheduled = t0 + i * interval
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(scheduled)))
    await asyncio.gather(*tasks)
    return latencies, errors, time.perf_counter() - t0


_ERRORS: dict[str, int] = {}


async def _closed_loop(pool: _Pool | _Spread, phase: Phase, raw: bytes) -> tuple[list[float], int, float]:
    latencies: list[float] = []
    errors = 0
    t0 = time.perf_counter()
    deadline = t0 + phase.duration_s

    async def worker() -> None:
        nonlocal errors
        while time.perf_counter() < deadline and len(latencies) < 100_000:
            start = time.perf_counter()
            try:
                if await pool.request(raw) >= 400:
                    errors += 1
            except Exception:
                errors += 1
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(worker() for _ in range(phase.concurrency)))
    return latencies, errors, time.perf_counter() - t0


def _cpu_s(pid: int) -> float | None:
    """User+system CPU seconds of a process (Linux /proc); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _cpu_sum_s(pids: list[int]) -> float | None:
    each = [_cpu_s(p) for p in pids]
    return None if any(c is None for c in each) else sum(c for c in each if c is not None)


async def _run_phases(base_url: str, token: str, phases: list[Phase], server_pid: int | list[int]) -> list[PhaseResult]:
    """``base_url``: one server, or several comma-separated (requests alternate); ``server_pid`` likewise."""
    pids = server_pid if isinstance(server_pid, list) else [server_pid]
    addrs = [u.removeprefix("http://").split(":") for u in base_url.split(",")]
    host = addrs[0][0]
    out: list[PhaseResult] = []
    pools = [_Pool(h, int(p), 64) for h, p in addrs]
    pool: _Pool | _Spread = pools[0] if len(pools) == 1 else _Spread(pools)
    try:
        for ph in phases:
            raw = _raw_request(ph, host, token)
            for _ in range(20):  # warm up connections and caches
                await pool.request(raw)
            cpu0 = _cpu_sum_s(pids)
            if ph.rate_per_s > 0:
                lat, errors, elapsed = await _open_loop(pool, ph, raw)
                mode = "open"
            else:
                lat, errors, elapsed = await _closed_loop(pool, ph, raw)
                mode = f"closed x{ph.concurrency}"
            cpu1 = _cpu_sum_s(pids)
            ms = np.array(lat) * 1000.0
            out.append(
                PhaseResult(
                    name=ph.name,
                    mode=mode,
                    target_rate_per_s=ph.rate_per_s,
                    sent=len(lat),
                    ok=len(lat) - errors,
                    errors=errors,
                    duration_s=round(elapsed, 3),
                    throughput_per_s=round((len(lat) - errors) / elapsed, 1),
                    p50_ms=round(float(np.percentile(ms, 50)), 2),
                    p90_ms=round(float(np.percentile(ms, 90)), 2),
                    p99_ms=round(float(np.percentile(ms, 99)), 2),
                    max_ms=round(float(ms.max()), 2),
                    server_cpu_ms_per_req=None
                    if cpu0 is None or cpu1 is None
                    else round((cpu1 - cpu0) * 1000.0 / max(1, len(lat)), 2),
                )
            )
    finally:
        pool.close()
    return out


def loadgen_main() -> None:
    """Entry of the load-generator process: reads a JSON job on stdin, writes JSON results on stdout."""
    job = json.loads(sys.stdin.read())
    phases = [Phase(**p) for p in job["phases"]]
    results = asyncio.run(_run_phases(job["base_url"], job["token"], phases, job["server_pid"]))
    if _ERRORS:
        sys.stderr.write(f"load generator errors: {_ERRORS}\n")
    sys.stdout.write(json.dumps([asdict(r) for r in results]))


# ---- orchestration (the bench process) --------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _seed(url: str, now_s: int, rng: np.random.Generator) -> str:
    """Migrate (``gpufleet db upgrade``), seed the fleet, and create an admin token (``gpufleet token create``),
    as an operator would; returns the token."""
    from sqlalchemy import insert, text
    from sqlalchemy.orm import Session

    from gpufleet.adapters.sql.engine import make_engine, writer
    from gpufleet.adapters.sql.models import ReservationRow, TeamBudgetRow, TeamRow, UtilizationRow
    from gpufleet.domain.money import price_to_uusd

    _cli("db", "upgrade", "--db", url)
    token = _cli("token", "create", "--role", "ml_platform_admin", "--user", "bench", "--db", url).strip()
    engine = make_engine(url)
    hours = 56 * 24
    t = (now_s // 3600 - hours) * 3600 + 3600 * np.arange(hours)
    daily = 1.0 + 0.3 * np.sin(2 * np.pi * (t % (7 * DAY_S)) / (7 * DAY_S))
    rows = []
    for w in range(12):
        gpus = 8.0 * (1 + w % 3) * daily * rng.uniform(0.8, 1.2, size=hours)
        util = np.clip(rng.normal(0.55, 0.15, size=hours), 0.02, 1.0)
        rows += [
            {
                "source": "dcgm",
                "bucket_start_s": int(t[i]),
                "bucket_s": 3600,
                "workload_id": f"wl_bench_{w:02d}",
                "team_id": f"team-{w % 4}",
                "sku_id": "h100_80gb",
                "gpus_allocated": float(gpus[i]),
                "gpu_util": float(util[i]),
                "queue_wait_s": float(rng.exponential(60.0)),
            }
            for i in range(hours)
        ]
    with Session(writer(engine)) as session:
        session.execute(insert(UtilizationRow), rows)
        for i in range(3):
            session.add(
                ReservationRow(
                    id=f"res_bench_{i}",
                    pool_id="aws/us-east-1/h100_80gb/reserved",
                    sku_id="h100_80gb",
                    region_id="us-east-1",
                    units=32,
                    start_s=now_s - 30 * DAY_S,
                    term_months=12,
                    price_uusd_per_gpu_h=price_to_uusd("4.3619"),
                    est_cost_cents=0,
                    status="active",
                    version=1,
                    approvals_required=2,
                    created_by="bench",
                    created_at_s=now_s - 40 * DAY_S,
                    budget_code="BENCH",
                    idempotency_key=f"gpufleet-res_bench_{i}",
                    provider_order_id=f"ord_bench_{i}",
                )
            )
        session.execute(text("UPDATE pools SET allocated_gpus = 90 WHERE id = 'aws/us-east-1/h100_80gb/reserved'"))
        # team-0's monthly budget, enforced: every budgeted placement is an admission (lock, figures, booking)
        session.add(TeamRow(id=BUDGET_TEAM, name="Team 0"))
        session.flush()
        session.add(
            TeamBudgetRow(
                team_id=BUDGET_TEAM,
                limit_cents=100_000_000_00,
                period="month",
                enforce=True,
                alert_at_json="[0.5, 0.8, 1.0]",
                updated_at_s=now_s,
                updated_by="bench",
                version=1,
            )
        )
        session.commit()
    engine.dispose()
    return token


def _cli(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", "from gpufleet.cli.main import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return proc.stdout


def run(
    *,
    pg_url: str,
    rate_per_s: float,
    duration_s: float,
    forecast_rate_per_s: float,
    saturation_s: float,
    seed: int = 0,
    processes: int = 1,
) -> dict[str, Any]:
    """``processes``: how many ``gpufleet serve`` processes share the schema; the load alternates over them."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from gpufleet.adapters.sql.migrate import DatabaseUnavailable
    from gpufleet.adapters.sql.roles import drop_store_roles

    if not pg_url.startswith("postgresql"):
        raise ValidationError("pg_url", f"expected a postgresql+psycopg:// URL, got {pg_url!r}")
    schema = f"gfbench_{secrets.token_hex(4)}"
    try:
        admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    except ArgumentError as exc:
        raise ValidationError("pg_url", str(exc)) from None
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    except DBAPIError as exc:
        raise DatabaseUnavailable(admin, exc) from None
    sep = "&" if "?" in pg_url else "?"
    url = f"{pg_url}{sep}options=-csearch_path%3D{schema}"
    servers: list[subprocess.Popen[bytes]] = []
    try:
        token = _seed(url, int(time.time()), np.random.default_rng(seed))
        env = {**os.environ, "GPUFLEET_RECONCILE_INTERVAL_S": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
        urls = []
        for _ in range(processes):
            port = _free_port()
            serve = ["serve", "--db", url, "--port", str(port), "--log-level", "warning"]
            servers.append(
                subprocess.Popen([sys.executable, "-c", "from gpufleet.cli.main import main; main()", *serve], env=env)
            )
            urls.append(f"http://127.0.0.1:{port}")
            _wait_ready(urls[-1], servers[-1])
        base_url = ",".join(urls)
        placement = {
            "job_class": "training",
            "priority": "high",
            "sku": "h100_80gb",
            "gpus": 16,
            "checkpointable": True,
        }
        budgeted = {**placement, "team": BUDGET_TEAM, "admit": True, "expected_run_s": 3600}
        fc_path = "/v1/capacity/forecast?sku=h100_80gb&days=90"
        phases = [
            Phase("GET /healthz (floor)", "GET", "/healthz", None, rate_per_s, duration_s),
            Phase(
                "POST /v1/placement/recommendations",
                "POST",
                "/v1/placement/recommendations",
                placement,
                rate_per_s,
                duration_s,
            ),
            Phase(
                "POST /v1/placement/recommendations (team budget, admit)",
                "POST",
                "/v1/placement/recommendations",
                budgeted,
                rate_per_s,
                duration_s,
            ),
            Phase("GET /v1/capacity/forecast", "GET", fc_path, None, forecast_rate_per_s, duration_s),
            Phase(
                "POST /v1/placement/recommendations",
                "POST",
                "/v1/placement/recommendations",
                placement,
                0,
                saturation_s,
            ),
            Phase("GET /v1/capacity/forecast", "GET", fc_path, None, 0, saturation_s),
            Phase(
                "POST /v1/placement/recommendations (team budget, admit)",
                "POST",
                "/v1/placement/recommendations",
                budgeted,
                0,
                saturation_s,
            ),
        ]
        pids = [srv.pid for srv in servers]
        job = {"base_url": base_url, "token": token, "server_pid": pids, "phases": [asdict(p) for p in phases]}
        proc = subprocess.run(
            [sys.executable, "-c", "from gpufleet.bench.api import loadgen_main; loadgen_main()"],
            input=json.dumps(job).encode(),
            capture_output=True,
            env=env,
            timeout=600,
            check=True,
        )
        sys.stderr.write(proc.stderr.decode())
        results = json.loads(proc.stdout)
    finally:
        for srv in servers:
            srv.terminate()
            srv.wait(timeout=30)
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
            drop_store_roles(conn, schema)  # migration 0009's per-schema roles (cluster-wide)
        admin.dispose()
    return {
        "backend": "postgresql",
        "server": f"gpufleet serve ({processes} uvicorn process{'es' if processes > 1 else ''}, one schema)",
        "load": "second process, asyncio keep-alive HTTP/1.1 client, loopback",
        "load_average_1m_before": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cpu_count": os.cpu_count(),
        "results": results,
    }


def _wait_ready(base_url: str, server: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("gpufleet serve exited during startup")
        try:
            if httpx.get(f"{base_url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("gpufleet serve did not become ready in 60 s")


def to_markdown(report: dict[str, Any]) -> str:
    lines = [
        "| endpoint | load | target req/s | sent | errors | throughput req/s | p50 ms | p90 ms | p99 ms | max ms "
        "| server CPU ms/req |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        target = "-" if r["target_rate_per_s"] == 0 else f"{r['target_rate_per_s']:g}"
        lines.append(
            f"| {r['name']} | {r['mode']} | {target} | {r['sent']} | {r['errors']} | {r['throughput_per_s']} | "
            f"{r['p50_ms']} | {r['p90_ms']} | {r['p99_ms']} | {r['max_ms']} | {r['server_cpu_ms_per_req']} |"
        )
    return "\n".join(lines)


def write_json(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
