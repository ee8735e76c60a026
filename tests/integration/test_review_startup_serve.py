"""Review (startup): how the served API starts and reports readiness when a dependency hangs.

Each test is an attack on a real uvicorn server over real HTTP (SQLite and PostgreSQL where the fixture gives both)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.adapters.providers import OrderRequest, ProviderOrder, SimulatedProvider
from gpufleet.adapters.sql.models import ReservationRow
from gpufleet.api.app import create_app
from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.deploy.apiserver import KUBECTL
from tests.integration.conftest import NOW_S, Database, ServerFactory, _free_port, _make_database
from tests.integration.pg_pool import SchemaPool
from tests.integration.tcp_proxy import TcpProxy

SMALL = {"sku": "h100_80gb", "units": 1, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}


class _Crash(RuntimeError):
    pass


def _crash(point: str) -> None:
    raise _Crash(point)


class HangingProvider:
    """A provider that accepts the call and never answers until released (a cloud API that hangs: the real adapters
    wait 10 s x 3 attempts per reservation, and a store can hold many approved reservations)."""

    def __init__(self, inner: SimulatedProvider) -> None:
        self.inner = inner
        self.release = threading.Event()
        self.called = threading.Event()

    def submit(self, key: str, order: OrderRequest) -> ProviderOrder:
        self.called.set()
        self.release.wait(60)
        return self.inner.submit(key, order)

    def find(self, key: str) -> ProviderOrder | None:
        self.called.set()
        self.release.wait(60)
        return self.inner.find(key)


def _approved_reservation(db: Database, make_server: ServerFactory) -> str:
    """A reservation left ``approved`` by a crash after the approval's commit, so the next start-up reconciles it."""
    doomed = make_server(db, provider=SimulatedProvider(db.engine), crash_hook=_crash)
    with doomed.client("finops_admin", "fiona") as c:
        rid = str(c.post("/v1/reservations", json=SMALL).json()["reservation_id"])
    with doomed.client("finops_admin", "alice") as c:  # not the requester
        assert c.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "ML"}).status_code == 500
    doomed.stop()
    return rid


def _status(db: Database, rid: str) -> str:
    with Session(db.engine) as s:
        return str(s.scalar(select(ReservationRow.status).where(ReservationRow.id == rid)))


def test_the_api_listens_while_a_hung_provider_holds_the_startup_reconcile(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: ``serve`` ran its start-up reconcile (provider calls) in the lifespan before
    uvicorn listened; a provider that hangs (10 s x 3 attempts per approved reservation) kept ``/healthz`` unanswered
    past the Deployment's 60 s startup probe, and the pod was restarted in a loop with the API never up. Now the
    lifespan waits for the pass at most STARTUP_RECONCILE_WAIT_S (3 s), the server listens, and the pass finishes
    in the background once the provider answers."""
    rid = _approved_reservation(database, make_server)
    provider = HangingProvider(SimulatedProvider(database.engine))
    settings = Settings(db_url=database.url, reconcile_interval_s=0, token_cache_s=0)
    services = build_services(settings, engine=database.engine, clock=FixedClock(NOW_S), provider=provider)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(services=services), host="127.0.0.1", port=port, log_level="critical")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        assert provider.called.wait(10), "the start-up reconcile never called the provider"
        answered_s: float | None = None
        while time.monotonic() - started < 15:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    answered_s = time.monotonic() - started
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert answered_s is not None and answered_s < 8.0, answered_s  # the startup probe allows 60 s in all
        assert _status(database, rid) == "approved"  # the provider still hangs: nothing recorded yet
        provider.release.set()  # the provider answers: the start-up reconcile finishes in the background
        deadline = time.monotonic() + 10
        while _status(database, rid) != "submitted" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _status(database, rid) == "submitted"  # the row's word for submitted_to_cloud
    finally:
        provider.release.set()
        server.should_exit = True
        thread.join(timeout=20)
    assert not thread.is_alive()


# ---- readiness: the probe's timeout and the route's own bound ------------------------------------------------


@pytest.fixture
def pg_database(tmp_path: Any, pg_reason: str | None, pg_schemas: SchemaPool) -> Iterator[Database]:
    yield from _make_database("postgres", tmp_path, pg_reason, schemas=pg_schemas)


def _rendered_api_and_config() -> tuple[dict[str, Any], dict[str, str]]:
    from pathlib import Path

    overlay = Path(__file__).resolve().parents[2] / "deploy" / "kustomize" / "overlays" / "example"
    assert KUBECTL is not None
    out = subprocess.run([KUBECTL, "kustomize", str(overlay)], capture_output=True, text=True, check=True)
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    api = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpufleet-api")
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpufleet-config")
    return api, dict(config["data"])


@pytest.mark.postgres
@pytest.mark.skipif(KUBECTL is None, reason="kubectl (which bundles kustomize) is not installed")
def test_readyz_answers_within_the_readiness_probe_timeout_when_the_database_is_silent(
    pg_database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: the readiness probe gave up after 2 s while ``/readyz`` waits up to the connect
    timeout + 1 s (6 s with the shipped settings) for the database: a slow but working database read as a probe
    timeout (not ready), never as the route's own 503 or its 200. Now the probe waits 8 s."""
    api, config = _rendered_api_and_config()
    (container,) = api["spec"]["template"]["spec"]["containers"]
    probe_timeout_s = float(container["readinessProbe"]["timeoutSeconds"])
    shipped = Settings(db_url=pg_database.url, **{k.removeprefix("GPUFLEET_").lower(): v for k, v in config.items()})
    proxy = TcpProxy("127.0.0.1", 5432)
    url = pg_database.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    pg_database.engine.dispose()
    from gpufleet.adapters.sql.engine import make_engine

    engine = make_engine(url, connect_timeout_s=shipped.db_connect_timeout_s)
    db = Database(url, pg_database.backend, engine)
    s = make_server(db, db_connect_timeout_s=shipped.db_connect_timeout_s)
    engine.dispose()  # no pooled connection: the probe opens a new one through the silent path
    proxy.freeze()
    with httpx.Client(base_url=s.base_url, timeout=60) as c:
        t0 = time.monotonic()
        r = c.get("/readyz")
        took = time.monotonic() - t0
    assert r.status_code == 503
    assert took < probe_timeout_s, (took, probe_timeout_s)  # the route answers before the kubelet gives up
    proxy.refuse()
