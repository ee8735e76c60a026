"""Review (cloud2): a reservation held ``blocked`` over several reconciler passes: what its reader sees
(``status_reason``) and what the audit log keeps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from tests.integration.conftest import LiveServer
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ORDER = {"sku": "h100_80gb", "units": 8, "start": "2026-02-01T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}
LINK = "https://www.googleapis.com/compute/v1/projects/fleet-prod/zones/us-east-1-a"


class _Denied(httpx.BaseTransport):
    """The inserts end in an operation DONE with a permission error naming ``permission`` (nothing created)."""

    def __init__(self, permission: str) -> None:
        self._inner = httpx.HTTPTransport()
        self._permission = permission

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith(("/reservations", "/futureReservations")):
            now = datetime.now(UTC).isoformat()
            op = {"kind": "compute#operation", "name": "operation-1-denied", "operationType": "insert",
                  "status": "DONE", "progress": 100, "insertTime": now, "startTime": now, "endTime": now,
                  "zone": LINK, "selfLink": f"{LINK}/operations/operation-1-denied",
                  "error": {"errors": [{"code": "PERMISSION_DENIED", "message":
                                        f"Required '{self._permission}' permission for 'projects/fleet-prod'"}]},
                  "httpErrorStatusCode": 403, "httpErrorMessage": "FORBIDDEN"}  # fmt: skip
            return httpx.Response(200, json=op)
        return self._inner.handle_request(request)


def _route(server: LiveServer, transport: httpx.BaseTransport | None) -> None:
    api = server.services.provider._api  # type: ignore[attr-defined]
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=transport)


def _audit(server: LiveServer, rid: str, action: str) -> list[dict[str, Any]]:
    with server.client("viewer", "vic") as c:
        got: list[dict[str, Any]] = c.get("/v1/audit", params={"entity_id": rid, "action": action}).json()
    return got


def _blocked(gcp_server: Start, permission: str) -> tuple[LiveServer, str]:
    server = gcp_server()
    _route(server, _Denied(permission))
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json=ORDER).json()["reservation_id"]
    assert approve(server, rid, "finops_admin", "alice").status_code == 200
    assert status(server, rid) == "blocked"
    return server, rid


def test_review_a_later_different_refusal_replaces_the_blocked_reason(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: a reservation blocked for one permission keeps that refusal as its ``status_reason`` when
    a later pass is refused for another (``_refused`` returns early when the target status is the current one): the
    operator fixes the first, and the reader still sees it, not the one now holding the order. Expected: the reason of the last refusal."""
    server, rid = _blocked(gcp_server, "compute.reservations.create")
    _route(server, _Denied("compute.futureReservations.create"))  # the first role granted, another one missing
    assert reconcile(server)["still_pending"] == [rid]
    with server.client("viewer", "vic") as c:
        reason = c.get(f"/v1/reservations/{rid}").json()["status_reason"]
    assert "compute.futureReservations.create" in reason, reason
    assert "'compute.reservations.create'" not in reason, reason


def test_review_a_blocked_order_is_audited_once_per_refusal(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: each reconciler pass writes ``reservation.submission_refused`` for a reservation that
    stays blocked for the same reason, so the audit log grows by one row per pass for as long as nobody fixes the
    permission (days at a short interval). Expected: the refusal audited when it holds the order, and again only when
    it changes.
    Fixed: ``ProviderOrders._refused`` skips a refusal equal to the one holding the order and rewrites
    ``status_reason`` (audited) when a different one holds it."""
    server, rid = _blocked(gcp_server, "compute.reservations.create")
    for _ in range(3):
        assert reconcile(server)["still_pending"] == [rid]
    assert len(_audit(server, rid, "reservation.submission_refused")) == 1
    _route(server, _Denied("compute.futureReservations.create"))
    reconcile(server)
    reconcile(server)
    assert len(_audit(server, rid, "reservation.submission_refused")) == 2
    _route(server, None)
    assert reconcile(server)["submitted"] == [rid] and status(server, rid) == "submitted_to_cloud"
