"""Review of the two-distinct-approver rule as a lying admin, over HTTP on SQLite and PostgreSQL: one person under
two spellings of a name, and a purchase split into reservations under the threshold that are created long before
they are approved (or approved long after they were created)."""

from __future__ import annotations

import secrets
import unicodedata
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.models import ApiTokenRow
from gpufleet.service.auth import TOKEN_PREFIX, hash_token
from gpufleet.service.clock import FixedClock
from tests.integration.conftest import NOW_S, Database, LiveServer, ServerFactory

DAY = 86_400
START = "2026-06-01T00:00:00Z"  # five months after NOW_S: still ahead after a month of waiting


def _client(s: LiveServer, role: str, user: str) -> httpx.Client:
    """A client for ``user``; a name with a zero-width character is refused by ``token create`` since session 44
    (tests/integration/test_review_susp_token_user.py), so its token is written as a store from before that rule
    holds it: the approval rules still compare such names as the person they read as."""
    if any(unicodedata.category(ch) == "Cf" for ch in user):
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with Session(s.services.engine) as db:
            db.add(ApiTokenRow(id=f"tok_{secrets.token_hex(8)}", token_hash=hash_token(token), user_id=user, role=role,
                               team_id=None, created_at_s=NOW_S, revoked=False, expires_at_s=None))  # fmt: skip
            db.commit()
        s.tokens[f"{role}:{user}:None"] = token
    return s.client(role, user)


def _res(units: int, term: int = 12, start: str = START) -> dict[str, Any]:
    return {"sku": "h100_80gb", "units": units, "start": start, "term_months": term, "regions": ["us-east-1"]}


def _approve(c: httpx.Client, rid: str) -> httpx.Response:
    return c.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "AI-2026"})


def _created(c: httpx.Client, body: dict[str, Any]) -> str:
    r = c.post("/v1/reservations", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["reservation_id"])


# 2 H100 x 12 months at the list price = 76,420 USD: under the 100 k$ threshold alone, above it two together.
@pytest.mark.parametrize("approver", ["Alice", " alice", "alice ", "ALICE", "\uff41lice", "alice\u200b"])
def test_the_requester_under_another_spelling_of_their_name_may_not_approve(
    database: Database, make_server: ServerFactory, approver: str
) -> None:
    """Review (fixed), the defect: the requester check compared user ids byte for byte, so a second token for the
    same person under ``Alice``, `` alice``, full-width ``ａlice`` or ``alice`` + a zero-width space approved
    ``alice``'s own reservation alone."""
    s = make_server(database)
    with s.client("finops_admin", "alice") as alice, _client(s, "ml_platform_admin", approver) as again:
        rid = _created(alice, _res(1, 1))
        r = _approve(again, rid)
        assert r.status_code == 403, r.text
        assert "may not approve" in r.json()["detail"]
        assert alice.get(f"/v1/reservations/{rid}").json()["status"] == "pending_approval"


@pytest.mark.parametrize("second", ["Bob", "BOB", " bob ", "\uff42\uff4f\uff42", "b\u200bob"])
def test_one_approver_under_two_spellings_is_not_two_approvers(
    database: Database, make_server: ServerFactory, second: str
) -> None:
    """Review (fixed), the defect: above the threshold the two approvals were compared by raw user id, so ``bob``
    (finops_admin) and ``BOB`` (ml_platform_admin), one person with two tokens, made the pair alone."""
    s = make_server(database)
    with s.client("finops_admin", "carol") as carol:
        rid = _created(carol, _res(8, 12))  # ~305 k$: two approvers
    with s.client("finops_admin", "bob") as bob, _client(s, "ml_platform_admin", second) as bob2:
        first = _approve(bob, rid)
        assert first.status_code == 200 and first.json()["status"] == "pending_approval"
        again = _approve(bob2, rid)
        assert again.status_code == 409, again.text
        assert "already approved" in again.json()["detail"]
        assert bob.get(f"/v1/reservations/{rid}").json()["status"] == "pending_approval"
        assert s.services.provider.find(f"gpufleet-{rid}") is None  # type: ignore[attr-defined]


def test_a_split_purchase_under_two_spellings_of_the_requester_still_adds_up(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: the requester's window matched ``created_by`` byte for byte, so halves of one
    purchase created as ``sam`` and ``Sam`` were each valued alone and each approved by one person."""
    s = make_server(database)
    with s.client("finops_admin", "sam") as sam, s.client("finops_admin", "Sam") as sam2:
        a, b = _created(sam, _res(2)), _created(sam2, _res(2))
    with s.client("ml_platform_admin", "bob") as bob:
        assert [_approve(bob, rid).json()["status"] for rid in (a, b)] == ["pending_approval"] * 2


def test_pending_halves_created_a_month_before_their_approval_still_add_up(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: the window counted the requester's reservations *created* in the last 30 days,
    so five halves created together, left pending for 31 days (their start is months ahead) and then approved one by
    one were each valued alone: 382 k$ committed on one approver per order."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    with s.client("finops_admin", "sam") as sam:
        rids = [_created(sam, _res(2)) for _ in range(5)]
    clock.advance(31 * DAY)
    with s.client("ml_platform_admin", "bob") as bob:
        outcomes = [(r.json()["status"], r.json()["approvals_required"]) for r in (_approve(bob, x) for x in rids)]
    assert outcomes == [("pending_approval", 2)] * 5


def test_an_order_approved_yesterday_counts_however_old_its_proposal(
    database: Database, make_server: ServerFactory
) -> None:
    """Review (fixed), the defect: a reservation created 31 days ago and approved today was outside the requester's
    window at once, so the next half created and approved the same day was valued alone (two halves of 76 k$
    each committed today, each on one approver)."""
    clock = FixedClock(NOW_S)
    s = make_server(database, clock=clock)
    with s.client("finops_admin", "sam") as sam:
        first = _created(sam, _res(2))
    clock.advance(31 * DAY)
    with s.client("ml_platform_admin", "bob") as bob:
        assert _approve(bob, first).json()["status"] == "submitted_to_cloud"  # alone: nothing else in the window
        with s.client("finops_admin", "sam") as sam:
            second = _created(sam, _res(2))
        r = _approve(bob, second)
    assert (r.json()["status"], r.json()["approvals_required"]) == ("pending_approval", 2)
