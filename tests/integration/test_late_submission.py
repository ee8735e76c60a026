"""An approved reservation whose start passes before its order reaches the provider (every attempt timed out, the
reconciler submits later): no order that starts in the past is placed, but one already placed is recorded."""

from __future__ import annotations

from gpufleet.adapters.providers import SimulatedProvider
from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, ServerFactory

BODY = {"sku": "h100_80gb", "units": 1, "start": "2026-01-02T00:00:00Z", "term_months": 1, "regions": ["us-east-1"]}


def _approved_but_unsubmitted(database: Database, make_server: ServerFactory, fault: str) -> tuple[str, object]:
    """A reservation approved while every submission attempt times out (``fault``), then the start passes."""
    clock = FixedClock(NOW_S)
    provider = SimulatedProvider(database.engine)
    s = make_server(database, provider=provider, clock=clock, provider_max_attempts=1)
    with s.client("finops_admin", "fran") as fran, s.client("ml_platform_admin", "bob") as bob:
        rid = fran.post("/v1/reservations", json=BODY).json()["reservation_id"]
        provider.inject(fault)  # type: ignore[arg-type]
        approved = bob.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "AI-2026"})
        assert approved.status_code == 200 and approved.json()["status"] == "approved", approved.text
    clock.advance(2 * 86_400)  # the start (a day after now) has passed before the reconciler's pass
    s.services.reservations.reconcile()
    with s.client("viewer", "vic") as c:
        return rid, c.get(f"/v1/reservations/{rid}").json()


def test_an_unplaced_order_whose_start_passed_is_cancelled(database: Database, make_server: ServerFactory) -> None:
    rid, after = _approved_but_unsubmitted(database, make_server, "timeout_before_order")
    assert after["status"] == "cancelled"
    assert SimulatedProvider(database.engine).find(f"gpufleet-{rid}") is None


def test_an_order_placed_before_the_start_is_still_recorded(database: Database, make_server: ServerFactory) -> None:
    rid, after = _approved_but_unsubmitted(database, make_server, "timeout_after_order")
    order = SimulatedProvider(database.engine).find(f"gpufleet-{rid}")
    assert order is not None
    assert after["status"] in ("submitted_to_cloud", "active") and after["provider_order_id"] == order.order_id
