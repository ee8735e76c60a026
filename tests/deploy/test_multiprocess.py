"""Several API processes on one PostgreSQL: approvals are taken by any process, provider submission and the
reconciler run in exactly one (the holder of the advisory lock), and a follower takes over when the leader dies.

Real ``gpufleet serve`` subprocesses on a fresh schema; the simulated provider's orders live in the same
database, so the test counts them there."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text

from gpufleet.adapters.sql import migrate
from gpufleet.service.auth import issue_token
from gpufleet.service.clock import RandomIds, SystemClock
from tests.deploy.conftest import PgSchema

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

GPUFLEET = str(Path(sys.executable).parent / "gpufleet")
DAY_S = 86_400
LEADER_POLL_S = 1.0
# A follower's approval waits for the leader's next poll: poll interval + one submission, with margin for a
# loaded 2-core machine.
SUBMIT_BOUND_S = 3 * LEADER_POLL_S + 5
PROVIDER_LATENCY_S = 2.0
# After SIGKILL: PostgreSQL frees the lock when the socket closes (at once), the follower sees it at its next
# poll (<= 1 s), runs the full reconciler, which finds the order under the same key (one provider answer: 2 s).
HANDOVER_BOUND_S = LEADER_POLL_S + PROVIDER_LATENCY_S + 7


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    url: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve(db_url: str, log: Path, **env: str) -> Proc:
    port = _free_port()
    full_env = {
        **os.environ,
        "GPUFLEET_DB_URL": db_url,
        "GPUFLEET_LEADER_POLL_S": str(LEADER_POLL_S),
        "GPUFLEET_TOKEN_CACHE_S": "0",
        **env,
    }
    popen = subprocess.Popen(
        [GPUFLEET, "serve", "--port", str(port), "--log-level", "warning"],
        env=full_env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"gpufleet serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return Proc(popen, url)
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    popen.kill()
    raise RuntimeError(f"gpufleet serve did not become ready: {log.read_text()[-2000:]}")


@pytest.fixture
def db(pg_schema: PgSchema) -> Iterator[Engine]:
    engine = create_engine(pg_schema.url)
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        if p.popen.poll() is None:
            p.popen.terminate()
            try:
                p.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.popen.kill()


def _token(engine: Engine, role: str, user: str) -> str:
    return issue_token(engine, SystemClock(), RandomIds(), role=role, user_id=user, team_id=None).token


def _leader_pid_by_key(engine: Engine, schema: str) -> int | None:
    """The OS pid in the application_name of the session holding this schema's leader lock (a 64-bit advisory
    key shows in pg_locks as classid = high 32 bits, objid = low 32 bits)."""
    with engine.connect() as conn:
        key = conn.execute(text("SELECT hashtextextended('gpufleet-leader:' || :s, 0)"), {"s": schema}).scalar_one()
        hi, lo = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
        names = conn.execute(
            text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = :hi AND l.objid::bigint = :lo"
            ),
            {"hi": hi, "lo": lo},
        ).all()
    assert len(names) <= 1, names  # never two leaders
    return int(names[0][0].rsplit(":", 1)[1]) if names else None


def _create(url: str, token: str) -> str:
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 30 * DAY_S))
    body = {"sku": "h100_80gb", "units": 1, "start": start, "term_months": 1, "regions": ["us-east-1"]}
    r = httpx.post(f"{url}/v1/reservations", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 201, r.text
    rid: str = r.json()["reservation_id"]
    return rid


def _approve(url: str, rid: str, token: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/reservations/{rid}/approve",
        json={"budget_code": "ML-2026"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )


def _status(url: str, rid: str, token: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/v1/reservations/{rid}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _wait_submitted(url: str, rid: str, token: str, bound_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound_s:
        if _status(url, rid, token)["status"] == "submitted_to_cloud":
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"{rid} not submitted within {bound_s} s: {_status(url, rid, token)}")


def _orders(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT idempotency_key FROM sim_provider_orders")).scalars())


def test_twenty_concurrent_approvals_over_two_processes_buy_once(
    db: Engine, pg_schema: PgSchema, procs: list[Proc], tmp_path: Path
) -> None:
    a = _serve(pg_schema.url, tmp_path / "a.log")
    procs.append(a)
    b = _serve(pg_schema.url, tmp_path / "b.log")
    procs.append(b)
    assert _leader_pid_by_key(db, pg_schema.name) == a.popen.pid  # the first to start leads
    viewer = _token(db, "viewer", "vic")
    rid = _create(a.url, _token(db, "finops_admin", "fiona"))
    approvers = [_token(db, ("finops_admin", "ml_platform_admin")[i % 2], f"user{i}") for i in range(20)]
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda i: _approve((a, b)[i % 2].url, rid, approvers[i]), range(20)))
    codes = sorted(r.status_code for r in answers)
    assert codes == [200] + [409] * 19, [r.text for r in answers if r.status_code not in (200, 409)]
    took_s = _wait_submitted(b.url, rid, viewer, SUBMIT_BOUND_S)
    assert _orders(db) == [f"gpufleet-{rid}"]  # exactly one provider order

    # an approval taken by the follower is left approved and submitted by the leader's next poll
    rid2 = _create(b.url, _token(db, "finops_admin", "fiona"))
    via_follower = _approve(b.url, rid2, _token(db, "ml_platform_admin", "bob"))
    assert via_follower.status_code == 200 and via_follower.json()["status"] == "approved"
    took2_s = _wait_submitted(b.url, rid2, viewer, SUBMIT_BOUND_S)
    assert sorted(_orders(db)) == sorted([f"gpufleet-{rid}", f"gpufleet-{rid2}"])
    print(f"submitted after {took_s:.2f} s (20 approvals) and {took2_s:.2f} s (follower approval)")


def test_leader_killed_during_submission_hands_over_with_one_order(
    db: Engine, pg_schema: PgSchema, procs: list[Proc], tmp_path: Path
) -> None:
    slow = {"GPUFLEET_SIM_PROVIDER_LATENCY_S": str(PROVIDER_LATENCY_S)}
    leader = _serve(pg_schema.url, tmp_path / "leader.log", **slow)
    procs.append(leader)
    follower = _serve(pg_schema.url, tmp_path / "follower.log", **slow)
    procs.append(follower)
    assert _leader_pid_by_key(db, pg_schema.name) == leader.popen.pid
    viewer = _token(db, "viewer", "vic")
    rid = _create(follower.url, _token(db, "finops_admin", "fiona"))
    assert _approve(follower.url, rid, _token(db, "ml_platform_admin", "bob")).json()["status"] == "approved"
    # the leader picks it up at its next poll, places the order and waits PROVIDER_LATENCY_S for the answer
    deadline = time.monotonic() + SUBMIT_BOUND_S
    while not _orders(db):
        assert time.monotonic() < deadline, "the leader never called the provider"
        time.sleep(0.05)
    leader.popen.send_signal(signal.SIGKILL)  # dies mid-submission: order placed, not recorded
    killed_at = time.monotonic()
    leader.popen.wait(timeout=10)
    assert _status(follower.url, rid, viewer)["status"] == "approved"  # the answer never got recorded
    took_s = _wait_submitted(follower.url, rid, viewer, HANDOVER_BOUND_S)
    handover_s = time.monotonic() - killed_at
    assert _orders(db) == [f"gpufleet-{rid}"]  # exactly one order after the handover
    assert _leader_pid_by_key(db, pg_schema.name) == follower.popen.pid
    assert _status(follower.url, rid, viewer)["provider_order_id"].startswith("ord_")
    print(f"handover: recorded {handover_s:.2f} s after SIGKILL (bound {HANDOVER_BOUND_S} s; waited {took_s:.2f} s)")
