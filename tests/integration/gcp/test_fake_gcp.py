"""The Compute Engine fake itself, driven with plain httpx: its behaviour, and that its validator catches what GCP
would refuse (those tests look at ``violations`` and then empty it, so the fixture's final check passes)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.gcp.fake_gcp import FakeGcp, validate

ZONE = "us-central1-a"
PROJECT = "test-project"
AUTH = {"Authorization": "Bearer test-token"}


@pytest.fixture
def client(fake_gcp: FakeGcp) -> Iterator[httpx.Client]:
    base = f"{fake_gcp.url}/compute/v1/projects/{PROJECT}/zones/{ZONE}/"
    with httpx.Client(base_url=base, headers=AUTH, timeout=10) as c:
        yield c


def reservation(name: str = "r-a100", count: Any = "2", **extra: Any) -> dict[str, Any]:
    props = {
        "machineType": "a2-highgpu-8g",
        "guestAccelerators": [{"acceleratorType": "nvidia-tesla-a100", "acceleratorCount": 8}],
    }
    return {"name": name, "specificReservation": {"count": count, "instanceProperties": props}, **extra}


def rid() -> dict[str, str]:
    return {"requestId": str(uuid.uuid4())}


def taken(fake: FakeGcp) -> list[str]:
    """The violations recorded so far, emptied (the test expected them)."""
    out = list(fake.violations)
    fake.violations.clear()
    return out


def test_insert_get_and_status(fake_gcp: FakeGcp, client: httpx.Client) -> None:
    body = reservation(
        description="gpufleet plan 7", deleteAtTime="2030-01-01T00:00:00Z", specificReservationRequired=True
    )
    r = client.post("reservations", params=rid(), json=body)
    assert r.status_code == 200, r.text
    op = r.json()
    assert op["kind"] == "compute#operation" and op["status"] == "DONE" and op["operationType"] == "insert"
    assert op["name"].startswith("operation-") and op["targetLink"].endswith(f"/zones/{ZONE}/reservations/r-a100")
    assert client.get(f"operations/{op['name']}").json()["status"] == "DONE"
    got = client.get("reservations/r-a100").json()
    assert got["status"] == "CREATING" and got["kind"] == "compute#reservation"
    assert (
        got["selfLink"] == f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}/reservations/r-a100"
    )
    assert got["zone"] == f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}"
    assert got["specificReservation"]["count"] == "2" and got["specificReservation"]["inUseCount"] == "0"
    assert got["description"] == "gpufleet plan 7" and got["deleteAtTime"] == "2030-01-01T00:00:00Z"
    assert got["id"].isdigit() and got["specificReservationRequired"] is True
    fake_gcp.set_status(ZONE, "r-a100", "READY")
    assert client.get("reservations/r-a100").json()["status"] == "READY"
    assert fake_gcp.calls["reservations.insert"] == 1 and fake_gcp.calls["reservations.get"] == 2
    assert fake_gcp.requests[0][0] == "reservations.insert" and fake_gcp.requests[0][2] == body


def test_same_request_id_is_one_reservation_and_one_operation(fake_gcp: FakeGcp, client: httpx.Client) -> None:
    q = rid()
    first = client.post("reservations", params=q, json=reservation()).json()
    again = client.post("reservations", params=q, json=reservation()).json()
    assert again["name"] == first["name"] and again.get("error") is None
    assert list(fake_gcp.reservations) == [(PROJECT, ZONE, "r-a100")]
    assert fake_gcp.calls["reservations.insert"] == 2


def test_same_name_with_another_request_id_already_exists(client: httpx.Client) -> None:
    assert client.post("reservations", params=rid(), json=reservation()).status_code == 200
    r = client.post("reservations", params=rid(), json=reservation())
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["code"] == 409 and err["errors"][0]["reason"] == "alreadyExists"


def test_refused_capacity_is_a_failed_operation_and_creates_nothing(fake_gcp: FakeGcp, client: httpx.Client) -> None:
    fake_gcp.refuse_capacity(ZONE)
    op = client.post("reservations", params=rid(), json=reservation()).json()
    assert op["status"] == "DONE" and op["httpErrorStatusCode"] == 503
    assert op["error"]["errors"][0]["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert fake_gcp.reservations == {}
    assert client.get("reservations/r-a100").json()["error"]["errors"][0]["reason"] == "notFound"
    fake_gcp.no_capacity.clear()
    assert client.post("reservations", params=rid(), json=reservation()).json().get("error") is None


def test_held_operations_run_until_finished(fake_gcp: FakeGcp, client: httpx.Client) -> None:
    client.post("reservations", params=rid(), json=reservation())
    fake_gcp.hold_operations(True)
    op = client.post("reservations/r-a100/resize", params=rid(), json={"specificSkuCount": "5"}).json()
    assert op["status"] == "RUNNING" and op["operationType"] == "resize"
    assert client.get(f"operations/{op['name']}").json()["status"] == "RUNNING"
    assert client.get("reservations/r-a100").json()["status"] == "UPDATING"
    fake_gcp.finish_operations()
    assert client.get(f"operations/{op['name']}").json()["status"] == "DONE"
    assert client.get("reservations/r-a100").json()["specificReservation"]["count"] == "5"
    op = client.delete("reservations/r-a100", params=rid()).json()
    assert client.get("reservations/r-a100").json()["status"] == "DELETING"
    fake_gcp.finish_operations()
    assert client.get("reservations/r-a100").status_code == 404


def test_list_pages(client: httpx.Client) -> None:
    assert "items" not in client.get("reservations").json()
    for n in ("r-1", "r-2", "r-3"):
        client.post("reservations", params=rid(), json=reservation(n))
    page = client.get("reservations", params={"maxResults": 2, "filter": 'name = "r-*"'}).json()
    assert [i["name"] for i in page["items"]] == ["r-1", "r-2"]
    rest = client.get("reservations", params={"maxResults": 2, "pageToken": page["nextPageToken"]}).json()
    assert [i["name"] for i in rest["items"]] == ["r-3"] and "nextPageToken" not in rest


def test_future_reservation_insert_and_cancel(fake_gcp: FakeGcp, client: httpx.Client) -> None:
    body = {
        "name": "fr-h100",
        "timeWindow": {"startTime": "2030-02-01T00:00:00Z", "endTime": "2030-03-01T00:00:00Z"},
        "specificSkuProperties": {"totalCount": "4", "instanceProperties": {"machineType": "a3-highgpu-8g"}},
        "planningStatus": "SUBMITTED",
        "autoDeleteAutoCreatedReservations": True,
        "autoCreatedReservationsDeleteTime": "2030-03-01T00:00:00Z",
    }
    op = client.post("futureReservations", params=rid(), json=body).json()
    assert op["status"] == "DONE" and op.get("error") is None
    fr = client.get("futureReservations/fr-h100").json()
    assert fr["status"] == {"procurementStatus": "PENDING_APPROVAL"} and fr["kind"] == "compute#futureReservation"
    assert fr["timeWindow"] == body["timeWindow"] and fr["specificSkuProperties"]["totalCount"] == "4"
    fake_gcp.set_procurement_status(ZONE, "fr-h100", "APPROVED")
    op = client.post("futureReservations/fr-h100/cancel", params=rid()).json()
    assert op["operationType"] == "cancel"
    assert client.get("futureReservations/fr-h100").json()["status"]["procurementStatus"] == "CANCELLED"


def test_gcp_refusals_are_not_violations(fake_gcp: FakeGcp, client: httpx.Client) -> None:
    r = client.post("reservations", params=rid(), json=reservation("Bad_Name"))
    assert r.status_code == 400 and r.json()["error"]["errors"][0]["reason"] == "invalid"
    assert client.get("reservations/nope").status_code == 404
    assert client.get("operations/operation-1-2").status_code == 404
    r = httpx.get(f"{client.base_url}reservations/nope")  # no token
    assert r.status_code == 401 and r.json()["error"]["errors"][0]["reason"] == "required"
    r = client.get("reservations", params={"maxResults": 501})  # GCP's own limit, not in the discovery document
    assert r.status_code == 400 and "less than or equal to 500" in r.json()["error"]["message"]
    assert fake_gcp.violations == []


def test_delayed_answer_is_performed_first(fake_gcp: FakeGcp, client: httpx.Client) -> None:
    fake_gcp.delay_next("reservations.insert", 1.0)
    q = rid()
    with pytest.raises(httpx.ReadTimeout):
        client.post("reservations", params=q, json=reservation(), timeout=0.3)
    assert (PROJECT, ZONE, "r-a100") in fake_gcp.reservations
    assert client.post("reservations", params=q, json=reservation()).json()["status"] == "DONE"  # the retry
    fake_gcp.throttle_next("reservations.get")
    r = client.get("reservations/r-a100")
    assert r.status_code == 429 and r.json()["error"]["errors"][0]["reason"] == "rateLimitExceeded"


@pytest.mark.parametrize(
    ("body", "params", "expect"),
    [
        (reservation(colour="blue"), rid(), "reservations.insert.colour: unknown field"),
        (reservation(count=2), rid(), "reservations.insert.specificReservation.count: expected a JSON string (int64)"),
        (reservation(count="two"), rid(), "'two' is not a int64 string of digits"),
        (reservation(status="READY"), rid(), "reservations.insert.status: output-only field sent by the client"),
        (reservation(deleteAtTime="tomorrow"), rid(), "'tomorrow' is not an RFC 3339 timestamp"),
        (reservation(deploymentType="SPARSE"), rid(), "'SPARSE' is not one of"),
        (reservation(), {**rid(), "dryRun": "true"}, "unknown query parameter dryRun"),
        (reservation(), {"requestId": "not-a-uuid"}, "is not a valid non-zero UUID"),
        (reservation(), {"requestId": "00000000-0000-0000-0000-000000000000"}, "is not a valid non-zero UUID"),
    ],
)
def test_validator_catches_malformed_requests(
    fake_gcp: FakeGcp, client: httpx.Client, body: dict[str, Any], params: dict[str, str], expect: str
) -> None:
    r = client.post("reservations", params=params, json=body)
    assert r.status_code == 400 and r.json()["error"]["errors"][0]["reason"] == "invalid"
    found = taken(fake_gcp)
    assert any(expect in v for v in found), found
    assert fake_gcp.reservations == {}


def test_validator_catches_bad_query_types_and_unknown_methods(fake_gcp: FakeGcp, client: httpx.Client) -> None:
    assert client.get("reservations", params={"maxResults": "many"}).status_code == 400
    assert client.get("reservations", params={"maxResults": "-1"}).status_code == 400
    assert client.post("futureReservations/fr/cancel", params=rid(), json={"why": "x"}).status_code == 400
    assert client.get("instances").status_code == 404
    assert client.get(f"{fake_gcp.url}/compute/v1/nowhere").status_code == 404
    found = taken(fake_gcp)
    assert len(found) == 5, found
    assert "not an integer" in found[0] and "out of range" in found[1] and "takes no request body" in found[2]
    assert found[3].startswith("instances.list (not faked)") and found[4].startswith("unknown method")


def test_validator_catches_a_bad_response() -> None:
    bad = {
        "kind": "compute#operation",
        "name": "operation-1",
        "status": "FINISHED",
        "progress": "100",
        "id": 42,
        "insertTime": "yesterday",
        "surprise": True,
        "error": {"errors": [{"code": "X", "message": None}]},
    }
    found = validate(bad, "Operation", "op", response=True)
    for expect in (
        "op.status: 'FINISHED' is not one of",
        "op.progress: expected a JSON number (int32)",
        "op.id: expected a JSON string (uint64)",
        "op.insertTime: 'yesterday' is not an RFC 3339",
        "op.surprise: unknown field",
        "op.error.errors[0].message: null in a response",
    ):
        assert any(v.startswith(expect) for v in found), (expect, found)
    assert validate({"name": "r", "params": {}}, "Reservation", "r", response=True) == [
        "r.params: input-only field in a response"
    ]
    assert validate({"status": "READY"}, "Reservation", "r", response=True) == []  # output-only is fine in a response


def test_a_refused_insert_is_replayed_to_its_request_id(fake_gcp: FakeGcp, client: httpx.Client) -> None:
    """GCP answers a requestId it has seen with that first operation, a failed one too, until it forgets the id."""
    q = rid()
    fake_gcp.refuse_capacity(ZONE)
    first = client.post("reservations", params=q, json=reservation()).json()
    fake_gcp.no_capacity.clear()
    again = client.post("reservations", params=q, json=reservation()).json()
    assert again["name"] == first["name"] and again["error"]["errors"][0]["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert fake_gcp.reservations == {}
    fake_gcp.forget_request_ids()
    assert client.post("reservations", params=q, json=reservation()).json().get("error") is None
    assert fake_gcp.reservation(ZONE, "r-a100")["status"] == "CREATING"
