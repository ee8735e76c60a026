"""The Azure provider over HTTP, on SQLite and PostgreSQL, against the ARM fake checked by azure-mgmt-compute: dual
approval then one future capacity reservation, followed from Azure's states to gpufleet's delete at the term's end;
a start under a week ahead bought from now; no capacity left to the reconciler; a lost answer found by name, one
reservation; a SKU Azure does not sell cancelled with the reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpufleet.adapters.resource_names import resource_name
from gpufleet.domain.reservations import term_seconds
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.conftest import NOW_S, LiveServer
from tests.integration.reservation_flow import approve, reconcile, status
from tests.integration.test_api_planning import SKU, _hourly, _ingest

DAY = 86_400
H100 = "Standard_ND96isr_H100_v5"
BIG = {"sku": "h100_80gb", "units": 16, "start": "2026-02-01T00:00:00Z", "term_months": 12, "regions": ["eastus"]}


def _advance(server: LiveServer, fake: FakeAzure, seconds: int) -> None:
    clock = server.services.clock
    clock.advance(seconds)  # type: ignore[attr-defined]
    fake.set_now(datetime.fromtimestamp(clock.now_s(), UTC))
    server.tokens.clear()  # a year on, the test's tokens have expired: new ones


def _create(server: LiveServer, **change: Any) -> str:
    with server.client("finops_admin", "fiona") as c:
        r = c.post("/v1/reservations", json={**BIG, **change})
    assert r.status_code == 201, r.text
    return str(r.json()["reservation_id"])


def test_a_future_reservation_from_two_approvals_to_gpufleets_delete(azure_server: Any, fake_azure: FakeAzure) -> None:
    server = azure_server()
    rid = _create(server)
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "pending_approval"
    assert fake_azure.calls["capacityReservations.createOrUpdate"] == 0  # nothing bought on one approval
    second = approve(server, rid, "ml_platform_admin", "bob")
    name = resource_name(f"gpufleet-{rid}")
    assert second.status_code == 200 and second.json()["status"] == "submitted_to_cloud"
    assert second.json()["provider_order_id"] == f"eastus/{name}"
    sent = fake_azure.reservation(name, name)
    assert sent["properties"]["scheduleProfile"]["start"] == "2026-02-01" and sent["sku"]["capacity"] == 2
    assert sent["zones"] == ["2"]
    assert reconcile(server)["activated"] == [] and status(server, rid) == "submitted_to_cloud"  # Pending
    fake_azure.set_reservation_state(name, name, "Live")
    assert reconcile(server)["activated"] == [rid] and status(server, rid) == "active"
    _advance(server, fake_azure, 31 * DAY + term_seconds(12))  # its term is over: gpufleet deletes it
    assert reconcile(server)["expired"] == [rid] and status(server, rid) == "expired"
    assert fake_azure.calls["capacityReservations.delete"] == 1
    with server.client("viewer", "vic") as c:
        events = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.status_changed"}).json()
    assert [(e["detail"]["to"], e["detail"]["reason"]) for e in events][-2:] == [
        ("active", "provider state Live"),
        ("expired", "provider state Live"),
    ]


def test_no_capacity_then_bought_once_and_a_lost_answer_put_again(azure_server: Any, fake_azure: FakeAzure) -> None:
    server = azure_server(provider_timeout_s=1.0, azure_max_attempts=1, provider_max_attempts=3)
    rid = _create(server, units=8, term_months=1, start="2026-01-03T00:00:00Z")  # under a week: from now
    fake_azure.refuse_capacity(H100)
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "approved"
    with server.client("viewer", "vic") as c:
        refused = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json()
    assert refused[0]["detail"]["code"] == "ZonalAllocationFailed" and refused[0]["detail"]["retryable"]
    fake_azure.allow_capacity(H100)
    fake_azure.delay_next("capacityReservations.createOrUpdate", 2.0)  # placed at Azure, the answer lost
    assert reconcile(server)["submitted"] == [rid]  # the service's retry finds it by name
    name = resource_name(f"gpufleet-{rid}")
    assert "scheduleProfile" not in fake_azure.reservation(name, name)["properties"]
    assert fake_azure.calls["capacityReservations.createOrUpdate"] == 2  # refused, then placed with its answer lost
    fake_azure.set_provisioning_state(name, name, "Succeeded")
    assert reconcile(server)["activated"] == [rid]


def test_a_sku_azure_does_not_sell_is_cancelled_with_the_reason(azure_server: Any, fake_azure: FakeAzure) -> None:
    server = azure_server()
    rid = _create(server, sku="l40s", units=8, term_months=1)
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "cancelled"
    with server.client("viewer", "vic") as c:
        refused = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json()
    assert refused[0]["detail"]["code"] == "sku_not_offered" and not fake_azure.calls


def test_the_outlook_reads_azure_quotas_and_drafts_what_a_person_files(
    azure_server: Any, fake_azure: FakeAzure
) -> None:
    """An Azure on-demand pool's quota is its VM family's vCPUs from the location's usages (192 / 12 = 16 H100s, not
    the stored 4); the outlook drafts the increase in vCPUs; filing it through gpufleet is refused (not built for
    Azure), naming where to file it."""
    server = azure_server()
    fake_azure.set_usage("eastus", "standardNDSH100v5Family", 192)
    with server.client("ml_platform_admin", "bob") as c:
        pool = {"id": f"azure/eastus/{SKU}/on_demand", "provider_id": "azure", "region_id": "eastus", "sku_id": SKU,
                "tier": "on_demand", "price_usd_per_gpu_h": "12.29", "quota_gpus": 4}  # fmt: skip
        assert c.post("/v1/pools", json=pool).status_code in (201, 409)
    _ingest(server, _hourly(NOW_S - 28 * DAY, 28, [4 + 0.5 * d for d in range(28)]))
    with server.client("viewer", "vic") as v:
        out = v.get("/v1/quotas/outlook", params={"sku": SKU, "days": 60}).json()
        read = v.get("/v1/quotas", params={"region": "eastus"}).json()
    od = next(p for p in out["pools"] if p["pool"] == f"azure/eastus/{SKU}/on_demand")
    assert od["quota_source"] == "compute_usages" and od["quota_gpus"] == 16 and od["exhausts_at_s"] is not None
    inc = od["increase"]
    assert inc["unit"] == "vCPU" and inc["current_value"] == 192.0 and inc["desired_value"] == inc["desired_gpus"] * 12
    assert inc["due"] is True and inc["turnaround_source"] == "increase_lead_days"
    assert read["provider"] == "azure" and [q["code"] for q in read["quotas"]] == ["standardNDSH100v5Family"]
    with server.client("finops_admin", "fiona") as c:
        filed = c.post("/v1/quotas/increases", json={"region": "eastus", "sku": SKU, "desired_gpus": 64})
        due = c.post("/v1/quotas/increases:file-due")
    assert filed.status_code == 409 and "not filed through gpufleet for azure" in filed.json()["detail"]
    assert due.status_code == 409


def test_a_start_beyond_azures_window_waits_approved_then_is_bought_ahead(
    azure_server: Any, fake_azure: FakeAzure
) -> None:
    """A start ten months out is more than Azure's six months for a future reservation: nothing is bought from now;
    the reservation stays approved through the passes until the window opens, then becomes a future reservation."""
    server = azure_server()
    rid = _create(server, units=8, term_months=1, start="2026-11-01T00:00:00Z")
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "approved"
    assert reconcile(server)["still_pending"] == [rid] and not fake_azure.calls  # no call, no refusal in the audit
    with server.client("viewer", "vic") as c:
        assert c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json() == []
    _advance(server, fake_azure, 130 * DAY)  # 2026-05-11: 174 days before the start
    assert reconcile(server)["submitted"] == [rid] and status(server, rid) == "submitted_to_cloud"
    name = resource_name(f"gpufleet-{rid}")
    assert fake_azure.reservation(name, name)["properties"]["scheduleProfile"]["start"] == "2026-11-01"


def test_an_unreadable_quota_leaves_the_stored_one_and_says_why(azure_server: Any, fake_azure: FakeAzure) -> None:
    """The usages answer only throttling: the outlook is answered all the same, the pool on its stored quota with the
    reason, and the failed read is not tried again for every pool nor within the cache's time."""
    server = azure_server(azure_max_attempts=2)
    with server.client("ml_platform_admin", "bob") as c:
        for tier in ("on_demand", "spot"):
            pool = {"id": f"azure/eastus/{SKU}/{tier}", "provider_id": "azure", "region_id": "eastus",
                    "sku_id": SKU, "tier": tier, "price_usd_per_gpu_h": "12.29", "quota_gpus": 4}  # fmt: skip
            assert c.post("/v1/pools", json=pool).status_code in (201, 409)
    _ingest(server, _hourly(NOW_S - 28 * DAY, 28, 6.0))
    fake_azure.throttle_next("usage.list", 10)
    for _ in range(2):
        with server.client("viewer", "vic") as v:
            r = v.get("/v1/quotas/outlook", params={"sku": SKU, "days": 30})
        assert r.status_code == 200, r.text
        pools = [p for p in r.json()["pools"] if p["provider"] == "azure"]
        assert [(p["quota_source"], p["quota_gpus"]) for p in pools] == [("stored", 4), ("stored", 4)]
        assert all("429" in p["quota_unread"] for p in pools)
    assert fake_azure.calls["usage.list"] == 2  # one read of two attempts, remembered for both pools and both asks
