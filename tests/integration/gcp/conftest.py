"""The GCP test world: the discovery-validated Compute Engine fake (tests/integration/gcp/fake_gcp.py), the Cloud
Quotas fake validated by Google's client library types (fake_quotas.py) and the discovery-validated Cloud Billing
Catalog fake (fake_billing.py), each started once per session on loopback. Every test here carries the ``gcp``
marker and fails if a request or a response broke the discovery document or the Cloud Quotas types."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.fake_fixtures import fake_fixtures
from tests.integration.conftest import NOW_S, Database, LiveServer
from tests.integration.gcp.fake_billing import FakeBilling
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.gcp.fake_quotas import FakeQuotas
from tests.integration.test_api_planning import SKU

PROJECT = "fleet-prod"
QUOTA_REGION = "europe-west4"  # the region of the quota tests' GCP pools (quota_server)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/gcp/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gcp)


fake_gcp_server, fake_gcp = fake_fixtures("fake_gcp", FakeGcp)


fake_quotas_server, fake_quotas = fake_fixtures("fake_quotas", FakeQuotas)


fake_billing_server, fake_billing = fake_fixtures("fake_billing", FakeBilling)


Start = Callable[..., LiveServer]


@pytest.fixture
def gcp_server(database: Database, fake_gcp: FakeGcp) -> Iterator[Start]:
    """A live API server with ``provider = gcp`` on the fake, on the test's database (SQLite and PostgreSQL)."""
    started: list[LiveServer] = []

    def start(**settings: Any) -> LiveServer:
        settings.setdefault("provider_timeout_s", 15.0)
        settings.setdefault("gcp_project", "fleet-prod")
        s = Settings(
            db_url=database.url,
            reconcile_interval_s=0,
            token_cache_s=0,
            provider="gcp",
            gcp_regions=["us-east-1"],  # the test store's region; its zone is us-east-1-a
            gcp_endpoint_url=f"{fake_gcp.url}/compute/v1/",
            gcp_credentials="none",
            **settings,
        )
        server = LiveServer(build_services(s, engine=database.engine, clock=FixedClock(NOW_S))).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def quota_server(database: Database, fake_gcp: FakeGcp, fake_quotas: FakeQuotas) -> Iterator[Start]:
    started: list[LiveServer] = []

    def start(**settings: Any) -> LiveServer:
        s = Settings(
            db_url=database.url,
            reconcile_interval_s=0,
            token_cache_s=0,
            provider="gcp",
            gcp_project=PROJECT,
            gcp_regions=[QUOTA_REGION],
            gcp_endpoint_url=f"{fake_gcp.url}/compute/v1/",
            gcp_quotas_endpoint_url=f"{fake_quotas.url}/v1/",
            gcp_credentials="none",
            **settings,
        )
        server = LiveServer(build_services(s, engine=database.engine, clock=FixedClock(NOW_S))).start()
        started.append(server)
        with server.client("ml_platform_admin", "bob") as c:
            for path, body in (
                ("/v1/providers", {"id": "gcp", "name": "Google Cloud", "kind": "hyperscaler"}),
                ("/v1/regions", {"id": QUOTA_REGION, "provider_id": "gcp", "geo": "eu"}),
            ):
                assert c.post(path, json=body).status_code in (201, 409)
            for tier, price in (("on_demand", "11.06"), ("spot", "3.50")):
                pool = {"id": f"gcp/{QUOTA_REGION}/{SKU}/{tier}", "provider_id": "gcp", "region_id": QUOTA_REGION,
                        "sku_id": SKU, "tier": tier, "price_usd_per_gpu_h": price, "quota_gpus": 4}  # fmt: skip
                assert c.post("/v1/pools", json=pool).status_code in (201, 409)
        return server

    yield start
    for server in started:
        server.stop()
