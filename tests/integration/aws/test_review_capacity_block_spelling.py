"""Review (fixed, session 43), the defect: Capacity Block approvals compared user ids byte for byte, as the
reservations' did before the procurement review: a token for "Fiona" approved "fiona"'s purchase alone, "BOB" as
finops_admin and "bob" as ml_platform_admin made the required pair, and blocks bought at once under "fiona" and
"Fiona" did not add up towards the threshold. People are compared by ``approval_rules.identity`` now."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.aws.test_capacity_block_approvals import SEARCH, _approve, _get, _offer, _pending

pytestmark = pytest.mark.aws


def test_the_requester_or_one_approver_under_another_spelling_is_refused(aws_server: Start, fake: FakeAws) -> None:
    server = aws_server(approval_threshold_usd="10000")
    pid = _pending(server, _offer(server))  # requested by "fiona"
    assert _approve(server, pid, "finops_admin", "Fiona").status_code == 403
    assert _approve(server, pid, "ml_platform_admin", "\uff46iona").status_code == 403  # full-width f
    assert _approve(server, pid, "finops_admin", "BOB").status_code == 200
    again = _approve(server, pid, "ml_platform_admin", " bob ")
    assert again.status_code == 409, again.text
    assert _get(server, pid)["status"] == "pending_approval" and fake.calls["PurchaseCapacityBlock"] == 0


def test_blocks_bought_at_once_under_two_spellings_add_up(aws_server: Start, fake: FakeAws) -> None:
    server = aws_server(approval_threshold_usd="10000")
    small = {**SEARCH, "gpus": 8, "duration_h": 7 * 24}
    with server.client("viewer", "vic") as v:
        offers = v.get("/v1/capacity-blocks/offerings", params=small).json()
    assert len(offers) >= 2 and float(offers[0]["upfront_fee_usd"]) + float(offers[1]["upfront_fee_usd"]) > 10_000

    def buy(user: str, offer: dict[str, Any]) -> httpx.Response:
        with server.client("finops_admin", user) as c:
            return c.post("/v1/capacity-blocks:purchase",
                          json={**small, "offering_id": offer["offering_id"], "budget_code": "ML-2026"})  # fmt: skip

    assert buy("fiona", offers[0]).status_code == 201
    second = buy("Fiona", offers[1])
    assert second.status_code == 202 and second.json()["status"] == "pending_approval", second.text
    assert fake.calls["PurchaseCapacityBlock"] == 1
