"""Review (susp2): gpufleet restarted with a wrong ``gcp_project`` (a typo, the staging value). Compute Engine answers
every call under a project that does not exist 404 ``notFound`` naming the project; that is a configuration error, not
"this reservation is gone"."""

from __future__ import annotations

from gpufleet.adapters.gcp.reservations import resource_name
from tests.integration.conftest import LiveServer
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_gcp import FakeGcp
from tests.integration.reservation_flow import approve, reconcile, status

ZONE = "us-east-1-a"
DAY = 86_400
ORDER = {"sku": "h100_80gb", "units": 16, "start": "2026-02-01T00:00:00Z", "term_months": 12, "regions": ["us-east-1"]}


def _submitted(server: LiveServer) -> str:
    with server.client("finops_admin", "fiona") as c:
        rid = str(c.post("/v1/reservations", json=ORDER).json()["reservation_id"])
    approve(server, rid, "finops_admin", "alice")
    return rid


def test_a_wrong_project_leaves_an_active_order_active(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: ``GoogleApi.get`` answers None (does not exist) for any ``notFound``, the project's own included, so
    ``describe`` reports every order ``NOT_FOUND`` and the reconciler ends the active ones as expired in gpufleet
    while GCP still holds and bills them in the right project. Now the pass answers 502 naming the project and the
    setting; no order changes state."""
    fake_gcp.only_projects("fleet-prod")
    server = gcp_server()
    rid = _submitted(server)
    server.services.clock.advance(31 * DAY)  # type: ignore[attr-defined]
    assert approve(server, rid, "ml_platform_admin", "bob").json()["status"] == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    fake_gcp.set_status(ZONE, name, "READY")
    assert reconcile(server)["activated"] == [rid]
    server.stop()
    wrong = gcp_server(gcp_project="fleet-staging")
    wrong.services.clock.advance(31 * DAY)  # type: ignore[attr-defined]
    with wrong.client("finops_admin", "alice") as c:
        r = c.post("/v1/reservations:reconcile")
    assert status(wrong, rid) == "active", "gpufleet ended an order that GCP still holds and bills"
    assert fake_gcp.reservation(ZONE, name)["status"] == "READY"
    assert r.status_code == 502 and "fleet-staging" in r.text and "gcp_project" in r.text, r.text


def test_a_wrong_project_leaves_an_approved_order_approved(gcp_server: Start, fake_gcp: FakeGcp) -> None:
    """Review (fixed), the defect: with the project missing, ``submit`` finds no order (None), inserts one, and the insert's notFound
    (the project) is a refusal of the order itself: the approved reservation is cancelled for a setting. Expected: a
    refusal about the moment (retryable), left approved for the next pass once the setting is fixed (now so)."""
    fake_gcp.only_projects("fleet-prod")
    server = gcp_server(gcp_project="fleet-staging")
    rid = _submitted(server)
    server.services.clock.advance(31 * DAY)  # type: ignore[attr-defined]
    got = approve(server, rid, "ml_platform_admin", "bob")
    assert got.json()["status"] == "approved", got.text
    assert not fake_gcp.reservations and not fake_gcp.future_reservations
