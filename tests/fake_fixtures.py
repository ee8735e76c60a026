"""The two fixtures of a cloud API fake: one server for the session, and per test the fake emptied, then the test
failed if a request or an answer broke the fake's checks (``violations``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import pytest


class Fake(Protocol):
    violations: list[str]

    def start(self) -> Any: ...
    def stop(self) -> None: ...
    def reset(self) -> None: ...


F = TypeVar("F", bound=Fake)


def fake_fixtures(name: str, make: Callable[[], F]) -> tuple[Any, Any]:
    """``(NAME_server, NAME)``: assign both in a conftest, e.g. ``fake_azure_server, fake_azure = fake_fixtures(...)``."""

    @pytest.fixture(scope="session", name=f"{name}_server")
    def server() -> Iterator[F]:
        fake = make()
        fake.start()
        yield fake
        fake.stop()

    @pytest.fixture(name=name)
    def per_test(request: pytest.FixtureRequest) -> Iterator[F]:
        fake: F = request.getfixturevalue(f"{name}_server")
        fake.reset()
        yield fake
        assert fake.violations == [], fake.violations

    return server, per_test
