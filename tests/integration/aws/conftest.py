"""The AWS test worlds: moto server (started once per session on loopback) and the model-validated fake in front
of it (tests/integration/aws/fake_aws.py). Fake credentials and the endpoint exist only inside these fixtures."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.adapters.aws.session import AwsClients, AwsConfig
from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.conftest import NOW_S, Database, LiveServer

Start = Callable[..., LiveServer]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _moto_binary() -> str:
    local = Path(sys.executable).parent / "moto_server"
    found = str(local) if local.exists() else shutil.which("moto_server")
    if found is None:
        pytest.fail("moto_server not installed: `pip install -e '.[dev]'` (moto[server] is in the dev extra)")
    return found


@pytest.fixture(scope="session")
def aws_env() -> Iterator[None]:
    """Fake credentials for the test session only (never real-looking secrets)."""
    mp = pytest.MonkeyPatch()
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        mp.delenv(k, raising=False)
    mp.setenv("AWS_ACCESS_KEY_ID", "testing")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
    mp.setenv("AWS_CONFIG_FILE", os.devnull)
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def moto_url(aws_env: None) -> Iterator[str]:
    """``moto_server -H 127.0.0.1 -p PORT``, started by the test session and stopped at its end."""
    port = _free_port()
    proc = subprocess.Popen(
        [_moto_binary(), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{url}/moto-api/", timeout=1)
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("moto_server did not start on loopback")
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def fake_server(moto_url: str) -> Iterator[FakeAws]:
    fake = FakeAws(moto_url).start()
    yield fake
    fake.stop()


@pytest.fixture
def fake(fake_server: FakeAws) -> Iterator[FakeAws]:
    """The fake, emptied for the test; the test fails if any request or response broke botocore's model."""
    fake_server.reset()
    yield fake_server
    assert fake_server.violations == [], fake_server.violations


def clients_for(url: str, **config: object) -> AwsClients:
    config.setdefault("regions", ("us-east-1",))
    config.setdefault("read_timeout_s", 15.0)  # a local fake, but the 2-core machine runs two workers beside it
    config.setdefault("connect_timeout_s", 2.0)
    return AwsClients(AwsConfig(endpoint_url=url, **config))  # type: ignore[arg-type]


@pytest.fixture
def aws_server(database: Database, fake: FakeAws) -> Iterator[Start]:
    started: list[LiveServer] = []

    def start(db: Database | None = None, **settings: Any) -> LiveServer:
        """A server on the fake with these settings, on ``db`` (default: the test's database)."""
        db = db or database
        settings.setdefault("provider_timeout_s", 15.0)  # once 5 s timed out under load (session 37's CI)
        settings.setdefault("aws_regions", ["us-east-1"])
        s = Settings(
            db_url=db.url,
            reconcile_interval_s=0,
            token_cache_s=0,
            provider="aws",
            aws_endpoint_url=fake.url,
            **settings,
        )
        services = build_services(s, engine=db.engine, clock=FixedClock(NOW_S))
        server = LiveServer(services).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
