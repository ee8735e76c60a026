"""Bearer tokens expire (migration 0005): an expired token is a 401 problem+json saying so (cached or not),
upgrading a database created at revision 0004 keeps its tokens working (no expiry), and `token create --ttl`
refuses a bad lifetime with one line and exit 2."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.cli.main import app as cli
from gpufleet.service.auth import hash_token, issue_token, parse_ttl
from gpufleet.service.clock import FixedClock, RandomIds
from tests.integration.conftest import BACKENDS, NOW_S, Database, ServerFactory, _make_database


@pytest.mark.parametrize("cache_s", [0.0, 60.0])
def test_expired_token_is_401_with_a_clear_detail(
    database: Database, make_server: ServerFactory, cache_s: float
) -> None:
    clock = FixedClock(NOW_S)
    server = make_server(database, clock=clock, token_cache_s=cache_s)
    issued = issue_token(database.engine, clock, RandomIds(), role="viewer", user_id="vic", team_id=None, ttl_s=3600)
    assert issued.expires_at_s == NOW_S + 3600
    with server.client() as c:
        auth = {"Authorization": f"Bearer {issued.token}"}
        assert c.get("/v1/skus", headers=auth).status_code == 200  # warms the cache when cache_s > 0
        clock.advance(3599)
        assert c.get("/v1/skus", headers=auth).status_code == 200
        clock.advance(1)
        r = c.get("/v1/skus", headers=auth)
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.headers["www-authenticate"] == "Bearer"
    body = r.json()
    assert body["status"] == 401
    assert body["detail"] == (
        f"token {issued.token_id} expired at 2026-01-01T01:00:00Z; "
        "create a new one with `gpufleet token create --ttl ...`"
    )


def test_token_without_expiry_keeps_working(database: Database, make_server: ServerFactory) -> None:
    clock = FixedClock(NOW_S)
    server = make_server(database, clock=clock)
    issued = issue_token(database.engine, clock, RandomIds(), role="viewer", user_id="vic", team_id=None, ttl_s=None)
    clock.advance(20 * 365 * 86400)
    with server.client() as c:
        assert c.get("/v1/skus", headers={"Authorization": f"Bearer {issued.token}"}).status_code == 200


@pytest.fixture(params=BACKENDS)
def old_database(request: pytest.FixtureRequest, tmp_path: Path, pg_reason: str | None) -> Iterator[Database]:
    yield from _make_database(request.param, tmp_path, pg_reason, revision="0004")


def test_upgrade_from_0004_keeps_existing_tokens_working(old_database: Database, make_server: ServerFactory) -> None:
    token = "gft_" + secrets.token_urlsafe(32)
    with old_database.engine.begin() as conn:  # a token as revision 0004 stored it (no expiry column)
        conn.execute(
            text(
                "INSERT INTO api_tokens (id, token_hash, user_id, role, team_id, created_at_s, revoked) "
                "VALUES ('tok_old', :h, 'olga', 'finops_admin', NULL, :t, false)"
            ),
            {"h": hash_token(token), "t": NOW_S - 400 * 86400},
        )
    assert migrate.upgrade(old_database.engine) == ("0004", migrate.head_revision(old_database.engine))
    with old_database.engine.connect() as conn:
        row = conn.execute(text("SELECT user_id, role, revoked, expires_at_s FROM api_tokens")).one()
    assert tuple(row) in (("olga", "finops_admin", False, None), ("olga", "finops_admin", 0, None))
    clock = FixedClock(NOW_S)
    server = make_server(old_database, clock=clock)
    with server.client() as c:
        auth = {"Authorization": f"Bearer {token}"}
        assert c.get("/v1/reservations", headers=auth).status_code == 200
        clock.advance(5 * 365 * 86400)  # a pre-0005 token has no expiry; revoke it to end it
        assert c.get("/v1/reservations", headers=auth).status_code == 200


@pytest.mark.parametrize(
    ("text_in", "seconds"), [("30d", 30 * 86400), ("12h", 43200), ("2w", 14 * 86400), ("90m", 5400), ("never", None)]
)
def test_parse_ttl(text_in: str, seconds: int | None) -> None:
    assert parse_ttl(text_in) == seconds


@pytest.mark.parametrize("bad", ["30", "30x", "-1d", "0d", "1.5d", "", "99999w", "d"])
def test_cli_token_create_bad_ttl_exits_2_without_traceback(tmp_path: Path, bad: str) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["db", "upgrade", "--db", url]).exit_code == 0
    r = runner.invoke(cli, ["token", "create", "--role", "viewer", "--user", "vic", "--ttl", bad, "--db", url])
    assert r.exit_code == 2, r.output
    assert "error: ttl:" in r.output and "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_cli_token_create_ttl_sets_the_expiry(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["db", "upgrade", "--db", url]).exit_code == 0
    r = runner.invoke(cli, ["token", "create", "--role", "viewer", "--user", "vic", "--ttl", "30d", "--db", url])
    assert r.exit_code == 0, r.output
    engine = make_engine(url)
    with engine.connect() as conn:
        created, expires = conn.execute(text("SELECT created_at_s, expires_at_s FROM api_tokens")).one()
    engine.dispose()
    assert expires - created == 30 * 86400


def test_cli_token_list_shows_status_and_never_the_secret(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["db", "upgrade", "--db", url]).exit_code == 0
    made = runner.invoke(cli, ["token", "create", "--role", "viewer", "--user", "vic", "--db", url])
    kept = runner.invoke(cli, ["token", "create", "--role", "app_team", "--team", "search", "--user", "ann",
                               "--ttl", "never", "--db", url])  # fmt: skip
    assert made.exit_code == 0 and kept.exit_code == 0
    engine = make_engine(url)
    with engine.begin() as conn:  # one token expired an hour ago, one revoked
        conn.execute(text("UPDATE api_tokens SET expires_at_s = :t WHERE user_id = 'vic'"), {"t": NOW_S - 3600})
    engine.dispose()
    old = issue_token(make_engine(url), FixedClock(NOW_S), RandomIds(), role="viewer", user_id="rex", team_id=None)
    assert runner.invoke(cli, ["token", "revoke", old.token_id, "--db", url]).exit_code == 0
    r = runner.invoke(cli, ["token", "list", "--db", url])
    assert r.exit_code == 0, r.output
    lines = {ln.split("│")[2].strip(): ln for ln in r.output.splitlines() if ln.count("│") >= 7}
    assert set(lines) == {"vic", "ann", "rex"}
    assert "expired" in lines["vic"] and "active" in lines["ann"] and "never" in lines["ann"]
    assert "revoked" in lines["rex"]
    for secret in (made.stdout.strip(), kept.stdout.strip(), old.token):
        assert secret.startswith("gft_") and secret not in r.output
