"""Capacity Blocks above the spend threshold, over HTTP on SQLite and PostgreSQL against the model-validated fake:
recorded for two distinct approvers (one finops_admin, one ml_platform_admin, never the requester), bought once by
the approval that completes the set, and each hostile case refused with the status a client can act on."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.conftest import NOW_S, Database, LiveServer
from tests.integration.test_hardening_db import _service_login

pytestmark = pytest.mark.aws
DAY = 86_400
PROBLEM = "application/problem+json"
# 4 x p5.48xlarge for 14 days: ~85 k$ upfront, above the 10,000 USD threshold these tests serve with
SEARCH: dict[str, Any] = {"region": "us-east-1", "sku": "h100_80gb", "gpus": 32, "duration_h": 14 * 24, "start_after_s": NOW_S,
          "end_before_s": NOW_S + 30 * DAY}  # fmt: skip
BASE = "/v1/capacity-blocks/purchases"


def _offer(server: LiveServer, index: int = 0) -> dict[str, Any]:
    with server.client("viewer", "vic") as v:
        offers = v.get("/v1/capacity-blocks/offerings", params=SEARCH)
    assert offers.status_code == 200, offers.text
    out: dict[str, Any] = offers.json()[index]
    assert float(out["upfront_fee_usd"]) > 10_000
    return out


def _request(server: LiveServer, offer: dict[str, Any], user: str = "fiona", budget: str = "ML-2026") -> httpx.Response:
    with server.client("finops_admin", user) as c:
        return c.post("/v1/capacity-blocks:purchase", json={**SEARCH, "offering_id": offer["offering_id"],
                                                            "budget_code": budget})  # fmt: skip


def _pending(server: LiveServer, offer: dict[str, Any]) -> str:
    r = _request(server, offer)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _approve(server: LiveServer, pid: str, role: str, user: str, **body: Any) -> httpx.Response:
    with server.client(role, user, team="t-ml" if role == "app_team" else None) as c:
        return c.post(f"{BASE}/{pid}/approve", json=body or {"budget_code": "ML-2026"})


def _get(server: LiveServer, pid: str) -> dict[str, Any]:
    with server.client("viewer", "vic") as v:
        r = v.get(f"{BASE}/{pid}")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_a_block_above_the_threshold_needs_a_finops_and_an_ml_platform_approver(
    aws_server: Start, fake: FakeAws
) -> None:
    server = aws_server(approval_threshold_usd="10000")
    offer = _offer(server)
    requested = _request(server, offer)
    assert requested.status_code == 202, requested.text
    req = requested.json()
    pid = req["id"]
    assert (req["status"], req["approvals_required"], req["requested_by"]) == ("pending_approval", 2, "fiona")
    assert req["upfront_fee_usd"] == offer["upfront_fee_usd"] and req["offering_id"] == offer["offering_id"]
    assert req["search"] == {k: SEARCH[k] for k in ("gpus", "duration_h", "start_after_s", "end_before_s")}
    assert req["budget_code"] == "ML-2026" and req["capacity_reservation_id"] is None
    # the requester's retry returns the same request; someone else's request for the same offering is a 409
    again = _request(server, offer)
    assert again.status_code == 202 and again.json()["id"] == pid
    assert _request(server, offer, user="frank").status_code == 409

    own = _approve(server, pid, "finops_admin", "fiona")
    assert own.status_code == 403 and own.headers["content-type"] == PROBLEM and "may not approve" in own.text
    for role, user in (("viewer", "vic"), ("app_team", "ann")):
        assert _approve(server, pid, role, user).status_code == 403
    first = _approve(server, pid, "finops_admin", "alice")
    assert first.status_code == 200 and first.json()["status"] == "pending_approval", first.text
    assert _approve(server, pid, "finops_admin", "alice").status_code == 409  # the same approver twice
    second_finops = _approve(server, pid, "finops_admin", "fred")  # two finops admins are not enough
    assert second_finops.status_code == 409 and "ml_platform_admin" in second_finops.json()["detail"]
    assert _get(server, pid)["status"] == "pending_approval"
    assert [a["user_id"] for a in _get(server, pid)["approvals"]] == ["alice"]
    assert fake.calls["PurchaseCapacityBlock"] == 0  # nothing bought before the second distinct approval

    done = _approve(server, pid, "ml_platform_admin", "bob", budget_code="ML-2026-Q1")
    assert done.status_code == 200, done.text
    body = done.json()
    cr_id = body["capacity_reservation_id"]
    assert body["status"] == "purchased" and cr_id in fake.reservations
    assert {(a["user_id"], a["role"]) for a in body["approvals"]} == {("alice", "finops_admin"),
                                                                      ("bob", "ml_platform_admin")}  # fmt: skip
    assert fake.calls["PurchaseCapacityBlock"] == 1
    tags = {t["Key"]: t["Value"] for t in fake.reservations[cr_id]["Tags"]}
    assert tags["gpufleet:idempotency-key"] == f"gpufleet-cb-{offer['offering_id']}"
    # a purchased request is not approved, rejected or requested again
    assert _approve(server, pid, "ml_platform_admin", "bea").status_code == 409
    with server.client("finops_admin", "alice") as c:
        assert c.post(f"{BASE}/{pid}/reject", json={"reason": "late"}).status_code == 409
    retried = _request(server, offer)
    assert retried.status_code == 202 and retried.json()["id"] == pid and retried.json()["status"] == "purchased"
    assert fake.calls["PurchaseCapacityBlock"] == 1

    with server.client("viewer", "vic") as v:
        listed = v.get(BASE).json()
        assert [p["id"] for p in listed] == [pid]
        assert v.get(BASE, params={"status": "pending_approval"}).json() == []
        events = v.get("/v1/audit", params={"entity_id": pid}).json()
        bought = v.get("/v1/audit", params={"entity_id": cr_id, "action": "capacity_block.purchased"}).json()
    actions = [e["action"] for e in events]
    assert actions[0] == "capacity_block.purchase_requested" and actions.count("capacity_block.approval_recorded") == 2
    changes = [
        (e["detail"]["from"], e["detail"]["to"]) for e in events if e["action"] == "capacity_block.status_changed"
    ]
    assert changes == [("pending_approval", "approved"), ("approved", "purchased")]
    assert bought[0]["detail"]["purchase_id"] == pid and bought[0]["actor"] == "bob"
    with server.client("app_team", "ann", team="t-ml") as a:
        assert a.get(BASE).status_code == 403 and a.get(f"{BASE}/{pid}").status_code == 403


def test_the_purchase_list_pages_with_limit_and_offset(aws_server: Start, fake: FakeAws) -> None:
    """Review (fixed), the defect: ``GET /v1/capacity-blocks/purchases`` took ``limit`` (at most 1000) but no
    ``offset``, so requests past the first 1000 could not be listed (an ``offset`` was silently ignored, and since
    this session an undeclared parameter is a 422). Now it pages as the other lists do."""
    server = aws_server(approval_threshold_usd="10000")
    with server.client("viewer", "vic") as v:
        offers = v.get("/v1/capacity-blocks/offerings", params=SEARCH).json()
    assert len(offers) >= 2, offers
    made = [_pending(server, offers[i]) for i in range(2)]
    with server.client("viewer", "vic") as v:
        whole = [p["id"] for p in v.get(BASE).json()]
        pages = [v.get(BASE, params={"limit": 1, "offset": k}) for k in range(3)]
        assert v.get(BASE, params={"offset": -1}).status_code == 422
    assert sorted(whole) == sorted(made)  # oldest first, then by id (both made at the same second here)
    assert [[p["id"] for p in r.json()] for r in pages] == [[whole[0]], [whole[1]], []]


def test_unknown_ids_bad_bodies_and_rejected_requests(aws_server: Start, fake: FakeAws) -> None:
    server = aws_server(approval_threshold_usd="10000")
    offer = _offer(server)
    pid = _pending(server, offer)
    with server.client("ml_platform_admin", "bob") as bob:
        assert bob.post(f"{BASE}/cbp_nope/approve", json={"budget_code": "X"}).status_code == 404
        assert bob.get(f"{BASE}/cbp_nope").status_code == 404
        assert bob.post(f"{BASE}/cbp_nope/submit").status_code == 404
        for body, field in (({}, "budget_code"), ({"budget_code": ""}, "budget_code"),
                            ({"budget_code": 7}, "budget_code"), ({"budget_code": "X", "role": "x"}, "role")):  # fmt: skip
            r = bob.post(f"{BASE}/{pid}/approve", json=body)
            assert r.status_code == 422 and r.headers["content-type"] == PROBLEM, r.text
            assert r.json()["field"] == field, r.text
        assert bob.get(BASE, params={"status": "bought"}).status_code == 422
        rejected = bob.post(f"{BASE}/{pid}/reject", json={"reason": "not this quarter"})
        assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
        assert bob.post(f"{BASE}/{pid}/reject", json={}).status_code == 409
        assert bob.post(f"{BASE}/{pid}/submit").status_code == 409
    with server.client("viewer", "vic") as v:
        assert v.post(f"{BASE}/{pid}/reject", json={}).status_code == 403
    assert _approve(server, pid, "finops_admin", "alice").status_code == 409  # approving a rejected request
    assert _get(server, pid)["status"] == "rejected" and _get(server, pid)["approvals"] == []
    # a rejected request does not block a new one for the same offering
    renewed = _request(server, offer)
    assert renewed.status_code == 202 and renewed.json()["id"] != pid
    assert fake.calls["PurchaseCapacityBlock"] == 0


def test_an_offering_no_longer_listed_is_not_bought(aws_server: Start, fake: FakeAws) -> None:
    server = aws_server(approval_threshold_usd="10000")
    offer = _offer(server)
    pid = _pending(server, offer)
    assert _approve(server, pid, "ml_platform_admin", "bob").json()["status"] == "pending_approval"
    fake.withdraw(offer["offering_id"])
    gone = _approve(server, pid, "finops_admin", "alice")
    assert gone.status_code == 409 and "no longer listed" in gone.json()["detail"], gone.text
    assert _get(server, pid)["status"] == "offering_gone"
    assert fake.calls["PurchaseCapacityBlock"] == 0
    with server.client("finops_admin", "alice") as c:
        assert c.post(f"{BASE}/{pid}/submit").status_code == 409


def test_concurrent_approvals_buy_once(aws_server: Start, fake: FakeAws) -> None:
    """The completing approval sent at once by two ml_platform_admins and twice by one of them: exactly one
    call buys, the provider sees one purchase, the others get a 409."""
    server = aws_server(approval_threshold_usd="10000")
    pid = _pending(server, _offer(server))
    assert _approve(server, pid, "finops_admin", "alice").status_code == 200
    users = ["bob", "bea", "bob", "bert"]
    barrier = threading.Barrier(len(users))
    results: list[httpx.Response] = []

    def go(user: str) -> None:
        with server.client("ml_platform_admin", user) as c:
            barrier.wait()
            results.append(c.post(f"{BASE}/{pid}/approve", json={"budget_code": "ML-2026"}))

    threads = [threading.Thread(target=go, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    codes = sorted(r.status_code for r in results)
    assert codes == [200, 409, 409, 409], [r.text for r in results]
    winner = next(r.json() for r in results if r.status_code == 200)
    assert winner["status"] == "purchased"
    assert fake.calls["PurchaseCapacityBlock"] == 1 and len(fake.reservations) == 1
    final = _get(server, pid)
    assert final["status"] == "purchased" and final["capacity_reservation_id"] == winner["capacity_reservation_id"]
    assert len(final["approvals"]) == 2


def test_a_lost_purchase_answer_is_found_by_its_key(aws_server: Start, fake: FakeAws) -> None:
    """The provider buys but its answer comes after the read timeout (one botocore attempt): the request stays
    approved (504), and ``submit`` finds the block by its purchase key instead of buying a second one."""
    server = aws_server(approval_threshold_usd="10000", provider_timeout_s=1.0, aws_max_attempts=1)
    offer = _offer(server)
    pid = _pending(server, offer)
    assert _approve(server, pid, "finops_admin", "alice").status_code == 200
    fake.delay_next("PurchaseCapacityBlock", 2.0)
    lost = _approve(server, pid, "ml_platform_admin", "bob")
    assert lost.status_code == 504, lost.text
    assert _get(server, pid)["status"] == "approved" and len(fake.reservations) == 1
    fake.withdraw(offer["offering_id"])  # sold: AWS no longer lists it, the key still finds the purchase
    with server.client("finops_admin", "alice") as c:
        retried = c.post(f"{BASE}/{pid}/submit")
        assert retried.status_code == 200, retried.text
        assert c.post(f"{BASE}/{pid}/submit").json() == retried.json()  # and again: nothing more happens
    assert retried.json()["status"] == "purchased"
    assert retried.json()["capacity_reservation_id"] == next(iter(fake.reservations))
    assert fake.calls["PurchaseCapacityBlock"] == 1
    with server.client("viewer", "vic") as v:
        unconfirmed = v.get("/v1/audit", params={"entity_id": pid, "action": "capacity_block.purchase_unconfirmed"})
    assert len(unconfirmed.json()) == 1


def test_the_reconciler_pass_buys_what_was_left_approved_once(aws_server: Start, fake: FakeAws) -> None:
    """Two requests left ``approved``: one whose completing approval got no answer before buying (the key lookup
    timed out: nothing bought), one whose purchase answer was lost (bought, not recorded). The reconciler's pass
    buys the first and finds the second by its key: two purchases at the provider in all, a second pass does
    nothing."""
    server = aws_server(approval_threshold_usd="10000", provider_timeout_s=1.0, aws_max_attempts=1)
    unbought, lost = (_pending(server, _offer(server, i)) for i in (0, 1))
    for pid, action in ((unbought, "DescribeCapacityReservations"), (lost, "PurchaseCapacityBlock")):
        assert _approve(server, pid, "finops_admin", "alice").status_code == 200
        fake.delay_next(action, 2.0)
        assert _approve(server, pid, "ml_platform_admin", "bob").status_code == 504
        assert _get(server, pid)["status"] == "approved"
    assert fake.calls["PurchaseCapacityBlock"] == 1 and len(fake.reservations) == 1
    first = server.services.reconciler.run_once().as_dict()["capacity_blocks"]
    assert sorted(first.pop("purchased")) == sorted([unbought, lost])
    assert first == {"offering_gone": [], "failed": [], "still_approved": [], "recorded": []}
    assert fake.calls["PurchaseCapacityBlock"] == 2 and len(fake.reservations) == 2
    assert {_get(server, p)["capacity_reservation_id"] for p in (unbought, lost)} == set(fake.reservations)
    second = server.services.reconciler.run_once().as_dict()["capacity_blocks"]
    assert second == {"purchased": [], "offering_gone": [], "failed": [], "still_approved": [], "recorded": []}
    assert fake.calls["PurchaseCapacityBlock"] == 2
    with server.client("viewer", "vic") as v:
        events = v.get("/v1/audit", params={"entity_id": lost, "action": "capacity_block.status_changed"}).json()
    assert events[-1]["actor"] == "reconciler" and events[-1]["detail"]["reason"] == "found by key"


def test_the_service_role_may_write_the_new_tables(aws_server: Start, fake: FakeAws, database: Database) -> None:
    """PostgreSQL: served as a login in the store's service group only (as a deployment serves), the whole story
    works: migration 0011's tables get the group's grants from the default privileges migration 0009 set. SQLite has
    no roles: the same story on its one file (as test_hardening_db does)."""
    served = database if database.backend == "sqlite" else _service_login(database)
    if database.backend == "postgres":
        with served.engine.connect() as conn:
            assert str(conn.execute(text("SELECT current_user")).scalar_one()).endswith("_service_login")
    try:
        server = aws_server(db=served, approval_threshold_usd="10000")
        pid = _pending(server, _offer(server))
        assert _approve(server, pid, "finops_admin", "alice").status_code == 200
        done = _approve(server, pid, "ml_platform_admin", "bob")
        assert done.status_code == 200 and done.json()["status"] == "purchased", done.text
        server.stop()
    finally:
        if served is not database:
            served.engine.dispose()


def test_blocks_split_under_the_threshold_go_to_two_approvers_once_their_sum_passes_it(
    aws_server: Start, fake: FakeAws
) -> None:
    """A lying admin splits a purchase into blocks each under the threshold: the first is bought at once, the one
    that takes the requester's at-once purchases of the approval window past the threshold is recorded for two
    approvers (202), nothing bought; another finops admin's own first block is still bought at once."""
    server = aws_server(approval_threshold_usd="10000")
    small = {**SEARCH, "gpus": 8, "duration_h": 7 * 24}
    with server.client("viewer", "vic") as v:
        offers = v.get("/v1/capacity-blocks/offerings", params=small).json()
    fees = [float(o["upfront_fee_usd"]) for o in offers[:3]]
    assert len(offers) >= 3 and all(f < 10_000 for f in fees) and fees[0] + fees[1] > 10_000, fees

    def buy(user: str, offer: dict[str, Any]) -> httpx.Response:
        with server.client("finops_admin", user) as c:
            body = {**small, "offering_id": offer["offering_id"], "budget_code": "ML-2026"}
            return c.post("/v1/capacity-blocks:purchase", json=body)

    first = buy("fiona", offers[0])
    assert first.status_code == 201 and first.json()["created"] is True, first.text
    second = buy("fiona", offers[1])
    assert second.status_code == 202 and second.json()["status"] == "pending_approval", second.text
    assert fake.calls["PurchaseCapacityBlock"] == 1
    other = buy("fred", offers[2])
    assert other.status_code == 201, other.text
    assert fake.calls["PurchaseCapacityBlock"] == 2
