"""The Azure test world: the fake of Azure Resource Manager's capacity reservation calls, validated by Microsoft's own
SDK (azure-mgmt-compute: its request builders and models; tests/integration/azure/fake_azure.py), started once per
session on loopback. Every test here carries the ``azure`` marker and fails if a request or a response broke the
SDK's routes or models."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.azure.fake_prices import FakeRetailPrices


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/azure/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.azure)


@pytest.fixture(scope="session")
def fake_azure_server() -> Iterator[FakeAzure]:
    fake = FakeAzure().start()
    yield fake
    fake.stop()


@pytest.fixture
def fake_azure(fake_azure_server: FakeAzure) -> Iterator[FakeAzure]:
    """The fake, emptied for the test; the test fails if any request or response broke the SDK's routes or models."""
    fake_azure_server.reset()
    yield fake_azure_server
    assert fake_azure_server.violations == [], fake_azure_server.violations


@pytest.fixture(scope="session")
def fake_prices_server() -> Iterator[FakeRetailPrices]:
    fake = FakeRetailPrices().start()
    yield fake
    fake.stop()


@pytest.fixture
def fake_prices(fake_prices_server: FakeRetailPrices) -> Iterator[FakeRetailPrices]:
    """The Retail Prices fake, emptied for the test; the test fails if a request or an answer broke its checks."""
    fake_prices_server.reset()
    yield fake_prices_server
    assert fake_prices_server.violations == [], fake_prices_server.violations
