"""Review (clouds): a 200 whose body is empty (an answer truncated to nothing by a proxy, a 204 of a gateway) to the
ARM client's read of a capacity reservation."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["eastus"]}


class _EmptyReads(httpx.BaseTransport):
    """Forwards every call to the fake but the reads, answered 200 with an empty body."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, content=b"")
        return self._inner.handle_request(request)


def test_review_an_empty_answer_to_a_read_is_not_a_foreign_reservation(
    azure_server: Any, fake_azure: FakeAzure
) -> None:
    """Review (fixed), the defect: ``json_object`` reads an empty 2xx body as ``{}`` (meant for a delete's empty
    answer); the lookup by name (``ArmApi.get``) takes that ``{}`` for a reservation without gpufleet's key tag, a
    non-retryable refusal (``name_taken``): the approved reservation is cancelled, nothing having been read. Expected: a
    read answered with nothing is no answer (unknown outcome): the reservation stays approved and the next pass buys
    it."""
    server = azure_server()
    api = server.services.provider._api  # type: ignore[attr-defined]
    healthy = api._http
    api._http = httpx.Client(base_url=healthy.base_url, timeout=healthy.timeout, transport=_EmptyReads())
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").status_code == 200
    assert status(server, rid) == "approved", "an empty answer to a read cancelled the reservation"
    api._http = healthy
    assert reconcile(server)["submitted"] == [rid] and len(fake_azure.reservations) == 1
