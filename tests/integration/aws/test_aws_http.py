"""The AWS provider over HTTP, on SQLite and PostgreSQL, against the model-validated fake: the reservation
lifecycle follows the provider's state; a retry after a timeout buys once; a Capacity Block purchase; a quota
read, the outlook on Service Quotas' numbers and an increase request."""

from __future__ import annotations

import pytest

from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.conftest import NOW_S
from tests.integration.reservation_flow import approve, reconcile, status
from tests.integration.test_api_planning import DAY, SKU, _hourly, _ingest

pytestmark = pytest.mark.aws
BIG = {"sku": "h100_80gb", "units": 16, "start": "2026-02-01T00:00:00Z", "term_months": 12, "regions": ["us-east-1"]}


def test_the_reservation_lifecycle_follows_the_provider(aws_server: Start, fake: FakeAws) -> None:
    server = aws_server()
    with server.client("finops_admin", "fiona") as c:
        created = c.post("/v1/reservations", json=BIG)
    assert created.status_code == 201, created.text
    rid = created.json()["reservation_id"]
    assert created.json()["approvals_required"] == 2
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "pending_approval"
    assert fake.calls["CreateCapacityReservation"] == 0  # nothing bought on one approval
    second = approve(server, rid, "ml_platform_admin", "bob")
    assert second.status_code == 200 and second.json()["status"] == "submitted_to_cloud"
    cr_id = second.json()["provider_order_id"]
    # CreateCapacityReservation carried the reservation's own key as its ClientToken
    assert fake.tokens == {f"gpufleet-{rid}": cr_id}
    sent = fake.reservations[cr_id]
    assert (sent["InstanceType"], sent["TotalInstanceCount"], sent["State"]) == ("p5.48xlarge", 2, "assessing")

    # the clock passes the start, but the provider still assesses: the reservation stays submitted
    server.services.clock.advance(40 * DAY)  # type: ignore[attr-defined]
    assert reconcile(server)["activated"] == []
    assert status(server, rid) == "submitted_to_cloud"
    fake.set_state(cr_id, "scheduled")
    assert reconcile(server)["activated"] == [] and status(server, rid) == "submitted_to_cloud"
    fake.set_state(cr_id, "active")
    assert reconcile(server)["activated"] == [rid]
    assert status(server, rid) == "active"
    # the term has not ended by the clock, but the provider says expired: expired it is
    fake.set_state(cr_id, "expired")
    assert reconcile(server)["expired"] == [rid]
    assert status(server, rid) == "expired"
    with server.client("viewer", "vic") as c:
        events = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.status_changed"}).json()
    assert [(e["detail"]["to"], e["detail"]["reason"]) for e in events][-2:] == [
        ("active", "provider state active"),
        ("expired", "provider state expired"),
    ]
    assert fake.calls["CreateCapacityReservation"] == 1


def test_a_provider_cancellation_before_activation_cancels_the_reservation(aws_server: Start, fake: FakeAws) -> None:
    server = aws_server()
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json={**BIG, "units": 1, "term_months": 1}).json()["reservation_id"]
    cr_id = approve(server, rid, "finops_admin", "alice").json()["provider_order_id"]
    fake.set_state(cr_id, "failed")
    assert reconcile(server)["cancelled"] == [rid]
    assert status(server, rid) == "cancelled"


def test_a_retry_after_a_timeout_creates_exactly_one_reservation(aws_server: Start, fake: FakeAws) -> None:
    # one botocore attempt per call, a 1 s read timeout; the service retries the submission up to 3 times
    server = aws_server(provider_timeout_s=1.0, aws_max_attempts=1, provider_max_attempts=3)
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json={**BIG, "units": 8, "term_months": 1}).json()["reservation_id"]
    fake.delay_next("CreateCapacityReservation", 2.0)  # placed at the provider, answer lost
    r = approve(server, rid, "finops_admin", "alice")
    assert r.status_code == 200 and r.json()["status"] == "submitted_to_cloud"
    assert fake.calls["CreateCapacityReservation"] == 1  # the retry looked the key up and found it
    assert len(fake.reservations) == 1 and list(fake.tokens) == [f"gpufleet-{rid}"]
    assert r.json()["provider_order_id"] == next(iter(fake.reservations))
    with server.client("ml_platform_admin", "bob") as c:  # and retrying by hand buys nothing more
        assert c.post(f"/v1/reservations/{rid}/submit").json()["status"] == "submitted_to_cloud"
    assert len(fake.reservations) == 1


def test_no_capacity_keeps_the_reservation_approved_for_the_reconciler(aws_server: Start, fake: FakeAws) -> None:
    server = aws_server(aws_max_attempts=1)
    with server.client("finops_admin", "fiona") as c:
        rid = c.post("/v1/reservations", json={**BIG, "units": 8, "term_months": 1}).json()["reservation_id"]
    fake.refuse_capacity("p5.48xlarge")
    assert approve(server, rid, "finops_admin", "alice").json()["status"] == "approved"
    with server.client("viewer", "vic") as c:
        refused = c.get("/v1/audit", params={"entity_id": rid, "action": "reservation.submission_refused"}).json()
    assert refused[0]["detail"]["code"] == "InsufficientInstanceCapacity" and refused[0]["detail"]["retryable"]
    fake.no_capacity.clear()  # capacity is back: the next reconciler pass buys it, once
    assert reconcile(server)["submitted"] == [rid]
    assert len(fake.reservations) == 1


def test_a_capacity_block_purchase(aws_server: Start, fake: FakeAws) -> None:
    server = aws_server(approval_threshold_usd="10000")
    search = {
        "region": "us-east-1",
        "sku": "h100_80gb",
        "gpus": 8,
        "duration_h": 24,
        "start_after_s": NOW_S,
        "end_before_s": NOW_S + 30 * DAY,
    }
    with server.client("viewer", "vic") as v:
        offers = v.get("/v1/capacity-blocks/offerings", params=search)
    assert offers.status_code == 200, offers.text
    offer = offers.json()[0]
    assert offer["instance_type"] == "p5.48xlarge" and offer["instance_count"] == 1 and offer["duration_h"] == 24
    with server.client("viewer", "vic") as v:  # EC2 takes 1-14 days, then whole weeks: 15 days is refused here
        odd = v.get("/v1/capacity-blocks/offerings", params={**search, "duration_h": 15 * 24})
        weeks = v.get("/v1/capacity-blocks/offerings", params={**search, "duration_h": 21 * 24})
    assert odd.status_code == 422 and odd.json()["field"] == "duration_h", odd.text
    assert weeks.status_code == 200, weeks.text
    body = {**search, "offering_id": offer["offering_id"], "budget_code": "ML-2026"}
    with server.client("ml_platform_admin", "bob") as c:
        assert c.post("/v1/capacity-blocks:purchase", json=body).status_code == 403  # finops buys
    with server.client("finops_admin", "fiona") as c:
        bought = c.post("/v1/capacity-blocks:purchase", json=body)
        assert bought.status_code == 201, bought.text
        again = c.post("/v1/capacity-blocks:purchase", json=body)
    cr_id = bought.json()["capacity_reservation_id"]
    assert bought.json()["created"] is True and again.json() == {**bought.json(), "created": False}
    fake.withdraw(offer["offering_id"])  # AWS no longer lists a sold offering: a retry still finds the purchase
    with server.client("finops_admin", "fiona") as c:
        retried = c.post("/v1/capacity-blocks:purchase", json=body)
    assert retried.status_code == 201 and retried.json() == again.json(), retried.text
    assert fake.calls["PurchaseCapacityBlock"] == 1 and fake.reservations[cr_id]["ReservationType"] == "capacity-block"
    # a 4-instance, 14-day block costs more than the 10,000 USD single-approver threshold: recorded for two
    # approvers, nothing bought (test_capacity_block_approvals.py has the rest of that story)
    big = {**search, "gpus": 32, "duration_h": 14 * 24}
    with server.client("finops_admin", "fiona") as c:
        pricey = c.get("/v1/capacity-blocks/offerings", params=big).json()[0]
        assert float(pricey["upfront_fee_usd"]) > 10_000
        pending = c.post(
            "/v1/capacity-blocks:purchase", json={**big, "offering_id": pricey["offering_id"], "budget_code": "X"}
        )
    assert pending.status_code == 202 and pending.json()["status"] == "pending_approval", pending.text
    assert fake.calls["PurchaseCapacityBlock"] == 1


def test_quota_read_outlook_and_increase_request(aws_server: Start, fake: FakeAws) -> None:
    server = aws_server()
    od = f"aws/us-east-1/{SKU}/on_demand"
    _ingest(server, _hourly(NOW_S - 28 * DAY, 28, [4 + 0.5 * d for d in range(28)]))
    with server.client("viewer", "vic") as v:
        read = v.get("/v1/quotas", params={"region": "us-east-1"})
        assert read.status_code == 200, read.text
        p_od = next(q for q in read.json()["quotas"] if q["code"] == "L-417A185B")
        assert p_od["unit"] == "vCPU" and p_od["value"] == 384.0 and p_od["open_request"] is None
        out = v.get("/v1/quotas/outlook", params={"sku": SKU, "days": 60}).json()
    pool = next(p for p in out["pools"] if p["pool"] == od)
    # 384 vCPUs of the P family / 24 vCPUs per H100 on p5.48xlarge = 16 GPUs, read, not typed in
    assert pool["quota_source"] == "service_quotas" and pool["quota_gpus"] == 16
    assert pool["exhausts_at_s"] is not None
    inc = pool["increase"]
    assert inc["quota_code"] == "L-417A185B" and inc["due"] is True
    assert inc["file_by_s"] == pool["exhausts_at_s"] - 14 * DAY and inc["turnaround_source"] == "increase_lead_days"
    assert inc["desired_gpus"] % 8 == 0 and inc["desired_gpus"] >= pool["peak_demand_gpus"]
    # others' pools keep their stored quota
    assert all(p["quota_source"] == "stored" for p in out["pools"] if p["provider"] != "aws")

    with server.client("ml_platform_admin", "bob") as c:
        filed = c.post(
            "/v1/quotas/increases",
            json={"region": "us-east-1", "sku": SKU, "tier": "on_demand", "desired_gpus": inc["desired_gpus"]},
        )
        assert filed.status_code == 201, filed.text
        assert c.post("/v1/quotas/increases:file-due").status_code == 409  # filing drafts is off by default
    req = filed.json()
    assert req["status"] == "PENDING" and req["desired_value"] == inc["desired_gpus"] * 24 == inc["desired_value"]
    assert fake.quota_requests[req["request_id"]]["DesiredValue"] == inc["desired_gpus"] * 24
    with server.client("viewer", "vic") as v:
        pending = next(
            p for p in v.get("/v1/quotas/outlook", params={"sku": SKU, "days": 60}).json()["pools"] if p["pool"] == od
        )
        assert pending["increase"]["reason"] == "request_open" and not pending["increase"]["due"]
        assert pending["increase"]["open_request"]["request_id"] == req["request_id"]
        fake.set_request_status(req["request_id"], "APPROVED")
        status = v.get(f"/v1/quotas/increases/{req['request_id']}", params={"region": "us-east-1"}).json()
        assert status["status"] == "APPROVED" and status["open"] is False
        after = next(
            p for p in v.get("/v1/quotas/outlook", params={"sku": SKU, "days": 60}).json()["pools"] if p["pool"] == od
        )
    assert after["quota_gpus"] == inc["desired_gpus"]  # the approved value, read back from Service Quotas
    assert after["increase"]["turnaround_source"] == "provider_history"
    with server.client("viewer", "vic") as v:
        bad = v.get("/v1/quotas", params={"region": "eu-west-9"})
    assert bad.status_code == 422 and bad.json()["field"] == "region"


def test_drafted_increases_are_filed_when_configured(aws_server: Start, fake: FakeAws) -> None:
    server = aws_server(aws_file_quota_increases=True)
    _ingest(server, _hourly(NOW_S - 28 * DAY, 28, [4 + 0.5 * d for d in range(28)]))
    with server.client("finops_admin", "fiona") as c:
        first = c.post("/v1/quotas/increases:file-due", params={"days": 60})
        assert first.status_code == 200, first.text
        filed = first.json()["filed"]
        # one request per quota: the P family's on-demand quota, sized for the largest need among its SKUs' pools
        assert [f["code"] for f in filed] == ["L-417A185B"] and filed[0]["status"] == "PENDING"
        assert c.post("/v1/quotas/increases:file-due", params={"days": 60}).json()["filed"] == []  # open covers it
    assert fake.calls["RequestServiceQuotaIncrease"] == 1
    with server.client("viewer", "vic") as v:
        events = v.get("/v1/audit", params={"action": "quota.increase_requested"}).json()
    assert [e["detail"]["reason"] for e in events] == ["outlook"]
