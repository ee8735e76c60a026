"""Review of the FinOps memo's invalidation by the API's middleware (``api/routes/finops.py:DecisionCounter``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpufleet.adapters.metrics import GpufleetMetrics
from gpufleet.api.routes.finops import DecisionCounter


@pytest.mark.parametrize("path", ["/v1/utilization:ingest", "/v1/reservations"])
def test_the_books_are_dropped_before_the_client_hears_the_write_succeeded(path: str) -> None:
    """Review (fixed), the defect: ``DecisionCounter`` dropped the memoized FinOps books after the whole response had
    been sent, so a client that read the dashboard as soon as its ingest returned 200 could be served the books
    without the ingest (for up to ``cache_s``) before the middleware got round to the invalidate."""
    dropped: list[bool] = []
    heard: list[tuple[str, bool]] = []

    async def handler(scope: Any, receive: Any, send: Any) -> None:  # a write route that committed: 200
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'{"status": "ok"}'})

    async def client(msg: Any) -> None:  # what the client sees, and whether the memo was dropped by then
        heard.append((msg["type"], bool(dropped)))

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    mw = DecisionCounter(handler, metrics=GpufleetMetrics(), on_write=lambda: dropped.append(True))
    asyncio.run(mw({"type": "http", "method": "POST", "path": path}, receive, client))
    assert heard == [("http.response.start", True), ("http.response.body", True)]
    assert dropped == [True]


def test_a_refused_write_keeps_the_books() -> None:
    """The memo stays when the write was refused (nothing changed in the store)."""
    dropped: list[bool] = []

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 422, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def client(msg: Any) -> None:
        return None

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    mw = DecisionCounter(handler, metrics=GpufleetMetrics(), on_write=lambda: dropped.append(True))
    asyncio.run(mw({"type": "http", "method": "POST", "path": "/v1/utilization:ingest"}, receive, client))
    assert dropped == []
