"""The Azure test world: the fake of Azure Resource Manager's capacity reservation calls, validated by Microsoft's own
SDK (azure-mgmt-compute: its request builders and models; tests/integration/azure/fake_azure.py), started once per
session on loopback. Every test here carries the ``azure`` marker and fails if a request or a response broke the
SDK's routes or models."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings
from tests.fake_fixtures import fake_fixtures
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.azure.fake_prices import PATH, FakeRetailPrices
from tests.integration.conftest import NOW_S, Database, LiveServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/azure/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.azure)


fake_azure_server, fake_azure = fake_fixtures("fake_azure", FakeAzure)


fake_prices_server, fake_prices = fake_fixtures("fake_prices", FakeRetailPrices)


@pytest.fixture
def azure_server(database: Database, fake_azure: FakeAzure) -> Iterator[Any]:
    """A live API server with ``provider = azure`` on the fake, on the test's database, with Azure's eastus and its
    reserved pools in the store; the fake's clock is the server's."""
    started: list[LiveServer] = []
    fake_azure.set_now(datetime.fromtimestamp(NOW_S, UTC))

    def start(**settings: Any) -> LiveServer:
        settings.setdefault("provider_timeout_s", 15.0)
        settings.setdefault("azure_resource_group", "gpu-fleet")
        s = Settings(
            db_url=database.url,
            reconcile_interval_s=0,
            token_cache_s=0,
            provider="azure",
            azure_subscription_id="00000000-0000-0000-0000-0000000000aa",
            azure_regions=["eastus"],
            azure_zones={"eastus": "2"},
            azure_endpoint_url=fake_azure.url,
            azure_credentials="none",
            **settings,
        )
        server = LiveServer(build_services(s, engine=database.engine, clock=FixedClock(NOW_S))).start()
        started.append(server)
        with server.client("ml_platform_admin", "bob") as c:
            for path, body in (
                ("/v1/providers", {"id": "azure", "name": "Microsoft Azure", "kind": "hyperscaler"}),
                ("/v1/regions", {"id": "eastus", "provider_id": "azure", "geo": "us"}),
            ):
                assert c.post(path, json=body).status_code in (201, 409)
            for sku in ("h100_80gb", "l40s"):
                pool = {"id": f"azure/eastus/{sku}/reserved", "provider_id": "azure", "region_id": "eastus",
                        "sku_id": sku, "tier": "reserved", "price_usd_per_gpu_h": "6.98", "term_months": 12}  # fmt: skip
                assert c.post("/v1/pools", json=pool).status_code in (201, 409)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def price_server(database: Database, fake_azure: FakeAzure, fake_prices: FakeRetailPrices) -> Iterator[Any]:
    started: list[LiveServer] = []

    def start() -> LiveServer:
        s = Settings(db_url=database.url, reconcile_interval_s=0, token_cache_s=0, provider="azure",
                     azure_subscription_id="00000000-0000-0000-0000-0000000000aa", azure_resource_group="gpu-fleet",
                     azure_regions=["eastus", "westus3"], azure_endpoint_url=fake_azure.url, azure_credentials="none",
                     azure_prices_url=f"{fake_prices.url}{PATH}")  # fmt: skip
        server = LiveServer(build_services(s, engine=database.engine, clock=FixedClock(NOW_S))).start()
        started.append(server)
        with server.client("ml_platform_admin", "bob") as c:
            for path, body in (
                ("/v1/providers", {"id": "azure", "name": "Azure", "kind": "hyperscaler"}),
                ("/v1/regions", {"id": "eastus", "provider_id": "azure", "geo": "us"}),  # westus3: not in the store
            ):
                assert c.post(path, json=body).status_code in (201, 409)
        return server

    yield start
    for server in started:
        server.stop()
