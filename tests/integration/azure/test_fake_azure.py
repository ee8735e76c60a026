"""The Azure fake itself, driven with plain httpx and with Microsoft's own ComputeManagementClient: its behaviour, and
that its checker catches what breaks the SDK's routes and models (those tests look at ``violations`` and then empty
it, so the fixture's final check passes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.mgmt.compute import ComputeManagementClient, models

from tests.integration.azure.arm_models import check, sdk_reads
from tests.integration.azure.fake_azure import FakeAzure

SUB, RG, GROUP = "00000000-0000-0000-0000-000000000001", "fleet-rg", "gpu-crg"
VERSION = "2026-04-01"
AUTH = {"Authorization": "Bearer test-token"}
PREFIX = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute"
GROUP_PATH = f"{PREFIX}/capacityReservationGroups/{GROUP}"
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
H100 = "Standard_ND96isr_H100_v5"
GROUP_TEMPLATE = "capacityReservationGroups/{capacityReservationGroupName}/capacityReservations"


@pytest.fixture
def client(fake_azure: FakeAzure) -> Iterator[httpx.Client]:
    fake_azure.set_now(NOW)
    with httpx.Client(base_url=fake_azure.url, headers=AUTH, params={"api-version": VERSION}, timeout=10) as c:
        yield c


def res_path(name: str) -> str:
    return f"{GROUP_PATH}/capacityReservations/{name}"


def reservation(capacity: int = 2, zone: str = "1", **extra: Any) -> dict[str, Any]:
    return {"location": "eastus", "sku": {"name": H100, "capacity": capacity}, "zones": [zone]} | extra


def future(start: str, **props: Any) -> dict[str, Any]:
    return reservation(properties={"scheduleProfile": {"start": start} | props})


def make_group(client: httpx.Client, zones: list[str] | None = None) -> httpx.Response:
    r = client.put(GROUP_PATH, json={"location": "eastus", "zones": zones or ["1", "2"], "tags": {"team": "ml"}})
    assert r.status_code in (200, 201), r.text
    return r


def taken(fake: FakeAzure) -> list[str]:
    """The violations recorded so far, emptied (the test expected them)."""
    out = list(fake.violations)
    fake.violations.clear()
    return out


def error(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


def test_group_and_reservation_round_trip(fake_azure: FakeAzure, client: httpx.Client) -> None:
    made = make_group(client)
    assert made.status_code == 201
    group = models.CapacityReservationGroup(made.json())
    assert group.id == GROUP_PATH and group.zones == ["1", "2"] and group.tags == {"team": "ml"}
    r = client.put(res_path("h100-a"), json=reservation(tags={"owner": "fleet"}))
    assert r.status_code == 201, r.text
    cr = models.CapacityReservation(r.json())
    assert cr.properties.provisioning_state == "Creating" and cr.sku.capacity == 2 and cr.zones == ["1"]
    assert len(cr.properties.reservation_id) == 36 and cr.properties.time_created == NOW
    assert cr.properties.provisioning_time == NOW and cr.tags == {"owner": "fleet"}
    assert r.json()["properties"]["timeCreated"] == "2026-05-01T12:00:00.0000000+00:00"
    assert "instanceView" not in r.json()["properties"]
    fake_azure.set_provisioning_state(GROUP, "h100-a", "Succeeded")
    got = client.get(res_path("h100-a"), params={"$expand": "instanceView"})
    view = models.CapacityReservation(got.json()).properties.instance_view
    assert view.utilization_info.current_capacity == 2 and view.statuses[0].code == "ProvisioningState/succeeded"
    assert view.reservation_state_info is None  # only a Future reservation has one
    g = client.get(GROUP_PATH, params={"$expand": "instanceView"}).json()
    assert g["properties"]["capacityReservations"] == [{"id": res_path("h100-a")}]
    assert g["properties"]["instanceView"]["capacityReservations"][0]["name"] == "h100-a"
    for body, model in ((got.json(), models.CapacityReservation), (g, models.CapacityReservationGroup)):
        assert check(body, model, "response", response=True) == [] and sdk_reads(body, model, "response") == []
    assert fake_azure.reservation(GROUP, "h100-a")["properties"]["provisioningState"] == "Succeeded"
    assert fake_azure.group(GROUP)["properties"]["capacityReservations"] == [{"id": res_path("h100-a")}]
    assert fake_azure.calls == {
        "capacityReservationGroups.createOrUpdate": 1,
        "capacityReservationGroups.get": 1,
        "capacityReservations.createOrUpdate": 1,
        "capacityReservations.get": 1,
    }
    assert fake_azure.violations == []


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (reservation(color="blue"), "body.color: unknown field of CapacityReservation"),
        (reservation(properties={"provisioningState": "Succeeded"}), "provisioningState: read-only field"),
        (reservation(properties={"reservationId": "x"}), "reservationId: read-only field"),
        (reservation(id="/x"), "body.id: read-only field"),
        (future("2026-05-20", minimum_commitment_days=14), "the REST name is 'minimumCommitmentDays'"),
        (reservation() | {"sku": {"name": H100, "capacity": "2"}}, "sku.capacity: expected a JSON integer"),
        (reservation() | {"zones": "1"}, "zones: expected a JSON array"),
        (reservation(tags={"n": 1}), "tags['n']: expected a JSON string"),
    ],
)
def test_a_body_that_breaks_the_sdk_models_is_a_violation(
    fake_azure: FakeAzure, client: httpx.Client, body: dict[str, Any], what: str
) -> None:
    make_group(client)
    r = client.put(res_path("bad"), json=body)
    assert error(r) == (400, "InvalidRequestContent")
    got = taken(fake_azure)
    assert len(got) == 1 and what in got[0], got
    assert "bad" not in str(fake_azure.reservations)


@pytest.mark.parametrize(
    ("params", "what"),
    [
        ({"api-version": "2024-03-01"}, "the fake serves only the SDK's default '2026-04-01'"),
        ({"api-version": VERSION, "$top": "5"}, "unknown query parameter '$top'"),
        ({"api-version": VERSION, "$expand": "instanceview"}, "$expand='instanceview' is not one of"),
    ],
)
def test_a_wrong_query_is_a_violation(
    fake_azure: FakeAzure, client: httpx.Client, params: dict[str, str], what: str
) -> None:
    make_group(client)
    r = httpx.get(f"{fake_azure.url}{GROUP_PATH}", params=params, headers=AUTH)
    assert r.status_code == 400
    got = taken(fake_azure)
    assert len(got) == 1 and what in got[0], got


def test_a_missing_api_version_is_a_violation(fake_azure: FakeAzure, client: httpx.Client) -> None:
    r = httpx.get(f"{fake_azure.url}{GROUP_PATH}", headers=AUTH)
    assert error(r) == (400, "MissingApiVersionParameter")
    assert len(taken(fake_azure)) == 1


def test_a_path_not_in_the_sdk_is_a_violation(fake_azure: FakeAzure, client: httpx.Client) -> None:
    assert client.get(f"{PREFIX}/capacityReservationGroup/{GROUP}").status_code == 404  # singular: no such route
    assert client.patch(GROUP_PATH, json={"tags": {}}).status_code == 404  # an SDK route the fake does not serve
    got = taken(fake_azure)
    assert "no route of azure-mgmt-compute" in got[0] and "capacityReservationGroups.update" in got[1], got
    assert fake_azure.calls == {}


def test_401_without_a_bearer_token(fake_azure: FakeAzure) -> None:
    r = httpx.get(f"{fake_azure.url}{GROUP_PATH}", params={"api-version": VERSION})
    assert (
        error(r) == (401, "AuthenticationFailed")
        and "'Authorization' header is missing" in r.json()["error"]["message"]
    )
    r = httpx.get(f"{fake_azure.url}{GROUP_PATH}", params={"api-version": VERSION}, headers={"Authorization": "x"})
    assert error(r) == (401, "AuthenticationFailed")


def test_put_is_idempotent_and_updates_capacity(fake_azure: FakeAzure, client: httpx.Client) -> None:
    make_group(client)
    first = client.put(res_path("h100-a"), json=reservation())
    again = client.put(res_path("h100-a"), json=reservation())
    assert (first.status_code, again.status_code) == (201, 200) and again.json() == first.json()
    assert make_group(client).status_code == 200  # the group too
    r = client.put(res_path("h100-a"), json=reservation(capacity=4))
    assert error(r) == (409, "OperationNotAllowed")  # still Creating
    fake_azure.set_provisioning_state(GROUP, "h100-a", "Succeeded")
    fake_azure.set_now(NOW + timedelta(hours=1))
    r = client.put(res_path("h100-a"), json=reservation(capacity=4))
    assert r.status_code == 200 and r.json()["sku"]["capacity"] == 4
    assert r.json()["properties"]["provisioningState"] == "Updating"
    assert r.json()["properties"]["reservationId"] == first.json()["properties"]["reservationId"]
    assert r.json()["properties"]["provisioningTime"].startswith("2026-05-01T13:00:00")
    assert error(client.put(res_path("h100-a"), json=reservation(zone="2"))) == (409, "PropertyChangeNotAllowed")
    r = client.put(GROUP_PATH, json={"location": "eastus", "zones": ["1"]})
    assert error(r) == (409, "PropertyChangeNotAllowed") and r.json()["error"]["target"] == "zones"


def test_the_reservation_must_fit_its_group(fake_azure: FakeAzure, client: httpx.Client) -> None:
    r = client.put(res_path("orphan"), json=reservation())
    assert error(r) == (404, "ParentResourceNotFound")
    assert error(client.get(res_path("orphan"))) == (404, "ParentResourceNotFound")
    make_group(client)
    r = client.put(res_path("x"), json=reservation() | {"location": "westus"})
    assert error(r) == (400, "InvalidParameter") and r.json()["error"]["target"] == "location"
    assert error(client.put(res_path("x"), json=reservation(zone="3"))) == (400, "InvalidParameter")
    assert error(client.put(res_path("x"), json={"sku": {"name": H100, "capacity": 1}})) == (400, "LocationRequired")
    r = client.put(res_path("x"), json={"location": "eastus", "sku": {"name": H100}, "zones": ["1"]})
    assert r.json()["error"]["target"] == "sku.capacity"
    assert fake_azure.violations == []


def test_future_reservation_start_window_and_state(fake_azure: FakeAzure, client: httpx.Client) -> None:
    make_group(client)
    r = client.put(res_path("later"), json=future((NOW + timedelta(days=6)).date().isoformat()))
    assert error(r) == (400, "InvalidParameter")
    assert r.json()["error"]["target"] == "properties.scheduleProfile.start"
    r = client.put(res_path("later"), json=future("2026-12-01"))  # more than 6 months ahead
    assert error(r) == (400, "InvalidParameter")
    assert error(client.put(res_path("later"), json=future("2026/05/09"))) == (400, "InvalidParameter")
    r = client.put(res_path("later"), json=future("2026-05-09"))
    assert r.status_code == 201, r.text
    profile = models.CapacityReservation(r.json()).properties.schedule_profile
    assert profile.start == "2026-05-09" and profile.minimum_commitment_days == 30
    assert profile.modifiable_until == datetime(2026, 5, 2, tzinfo=UTC)
    plain = client.get(res_path("later")).json()
    assert "instanceView" not in plain["properties"]
    got = client.get(res_path("later"), params={"$expand": "instanceView"})
    state = models.CapacityReservation(got.json()).properties.instance_view.reservation_state_info
    assert state.reservation_state == "Pending"
    fake_azure.set_reservation_state(GROUP, "later", "Committed")
    assert error(client.delete(res_path("later"))) == (409, "OperationNotAllowed")
    fake_azure.set_now(datetime(2026, 6, 8, 0, 1, tzinfo=UTC))  # 30 days after the start
    assert client.delete(res_path("later")).status_code == 200
    with pytest.raises(ValueError, match="not one of"):
        fake_azure.set_reservation_state(GROUP, "x", "Done")


def test_refused_capacity_until_allowed(fake_azure: FakeAzure, client: httpx.Client) -> None:
    make_group(client)
    fake_azure.refuse_capacity(H100)
    r = client.put(res_path("h100-a"), json=reservation())
    assert error(r) == (409, "ZonalAllocationFailed") and "sufficient capacity" in r.json()["error"]["message"]
    assert error(client.put(res_path("h100-a"), json=reservation())) == (409, "ZonalAllocationFailed")
    fake_azure.allow_capacity(H100)
    assert client.put(res_path("h100-a"), json=reservation()).status_code == 201
    fake_azure.set_provisioning_state(GROUP, "h100-a", "Succeeded")
    fake_azure.refuse_capacity(H100, code="SkuNotAvailable")
    assert error(client.put(res_path("h100-a"), json=reservation(capacity=3))) == (409, "SkuNotAvailable")
    assert client.put(res_path("h100-a"), json=reservation(capacity=1)).status_code == 200  # a decrease allocates none
    assert fake_azure.reservation(GROUP, "h100-a")["sku"]["capacity"] == 1


def test_throttle_answers_429_with_retry_after(fake_azure: FakeAzure, client: httpx.Client) -> None:
    make_group(client)
    fake_azure.throttle_next("capacityReservationGroups.get", times=2)
    for _ in range(2):
        r = client.get(GROUP_PATH)
        assert error(r) == (429, "TooManyRequests") and r.headers["Retry-After"] == "1"
    assert client.get(GROUP_PATH).status_code == 200
    assert fake_azure.calls["capacityReservationGroups.get"] == 3


def test_a_delayed_answer_is_performed_but_lost(fake_azure: FakeAzure, client: httpx.Client) -> None:
    make_group(client)
    fake_azure.delay_next("capacityReservations.createOrUpdate", 1.0)
    with pytest.raises(httpx.ReadTimeout):
        client.put(res_path("h100-a"), json=reservation(), timeout=0.2)
    assert fake_azure.reservation(GROUP, "h100-a")["properties"]["provisioningState"] == "Creating"
    assert client.put(res_path("h100-a"), json=reservation()).status_code == 200  # the retry finds it made


def test_delete_then_404_and_a_group_that_holds_reservations(fake_azure: FakeAzure, client: httpx.Client) -> None:
    make_group(client)
    client.put(res_path("h100-a"), json=reservation())
    assert error(client.delete(GROUP_PATH)) == (409, "OperationNotAllowed")
    r = client.delete(res_path("h100-a"))
    assert r.status_code == 200 and r.content == b""
    assert error(client.get(res_path("h100-a"))) == (404, "ResourceNotFound")
    assert client.delete(res_path("h100-a")).status_code == 204  # ARM: deleting what is not there
    assert client.delete(GROUP_PATH).status_code == 200
    assert error(client.get(GROUP_PATH)) == (404, "ResourceNotFound")


def test_the_list_pages_with_next_link(fake_azure: FakeAzure, client: httpx.Client) -> None:
    make_group(client)
    names = [f"r{i}" for i in range(5)]
    for n in names:
        assert client.put(res_path(n), json=reservation(capacity=1)).status_code == 201
    fake_azure.set_page_size(2)
    seen, pages = [], 0
    r = client.get(f"{GROUP_PATH}/capacityReservations")
    while True:
        pages += 1
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [models.CapacityReservation(v).name for v in page["value"]]
        if "nextLink" not in page:
            break
        r = httpx.get(page["nextLink"], headers=AUTH)  # verbatim, as the SDK follows it
    assert seen == names and pages == 3
    r = client.get(f"{GROUP_PATH}/capacityReservations", params={"$skiptoken": "forged"})
    assert r.status_code == 400 and "$skiptoken" in taken(fake_azure)[0]


class Token:
    """A TokenCredential for the SDK."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("test-token", int(time.time()) + 3600)


def test_microsofts_own_client_is_served_without_a_violation(fake_azure: FakeAzure) -> None:
    """ComputeManagementClient (its routes, api-version, bodies without read-only fields, its LRO poller on the
    provisioningState, its pager) against the fake; ``enforce_https=False`` lets its bearer policy speak plain HTTP."""
    fake_azure.set_now(NOW)
    sdk = ComputeManagementClient(Token(), SUB, base_url=fake_azure.url, polling_interval=0.05)
    kw: dict[str, Any] = {"enforce_https": False}
    group = sdk.capacity_reservation_groups.create_or_update(
        RG, GROUP, models.CapacityReservationGroup(location="eastus", zones=["1"], tags={"team": "ml"}), **kw
    )
    assert group.id == GROUP_PATH
    want = models.CapacityReservation(location="eastus", sku=models.Sku(name=H100, capacity=2), zones=["1"])
    poller = sdk.capacity_reservations.begin_create_or_update(RG, GROUP, "h100-a", want, **kw)
    time.sleep(0.2)
    assert not poller.done()  # polling the reservation while it is Creating
    fake_azure.set_provisioning_state(GROUP, "h100-a", "Succeeded")
    made = poller.result(timeout=10)
    assert made.provisioning_state == "Succeeded" and made.sku.capacity == 2
    fake_azure.provision_instantly()
    future_one = models.CapacityReservation(
        location="eastus",
        sku=models.Sku(name=H100, capacity=1),
        zones=["1"],
        properties=models.CapacityReservationProperties(schedule_profile=models.ScheduleProfile(start="2026-05-20")),
    )
    later = sdk.capacity_reservations.begin_create_or_update(RG, GROUP, "later", future_one, **kw).result(timeout=10)
    assert later.schedule_profile.modifiable_until == datetime(2026, 5, 13, tzinfo=UTC)
    got = sdk.capacity_reservations.get(RG, GROUP, "later", expand="instanceView", **kw)
    assert got.instance_view.reservation_state_info.reservation_state == "Pending"
    fake_azure.set_page_size(1)
    listed = list(sdk.capacity_reservations.list_by_capacity_reservation_group(RG, GROUP, **kw))
    assert [r.name for r in listed] == ["h100-a", "later"]
    fake_azure.refuse_capacity(H100)
    with pytest.raises(ResourceExistsError) as refused:  # the SDK maps any 409 to ResourceExistsError
        sdk.capacity_reservations.begin_create_or_update(RG, GROUP, "more", want, **kw)
    assert refused.value.error is not None and refused.value.error.code == "ZonalAllocationFailed"
    with pytest.raises(HttpResponseError) as held:
        sdk.capacity_reservation_groups.begin_delete(RG, GROUP, **kw).result(timeout=10)
    assert held.value.status_code == 409
    for name in ("h100-a", "later"):
        sdk.capacity_reservations.begin_delete(RG, GROUP, name, **kw).result(timeout=10)
    sdk.capacity_reservation_groups.begin_delete(RG, GROUP, **kw).result(timeout=10)
    with pytest.raises(ResourceNotFoundError):
        sdk.capacity_reservation_groups.get(RG, GROUP, **kw)
    assert fake_azure.violations == []


def test_the_checker_reads_the_sdk() -> None:
    """The routes come from the SDK's request builders; a response's datetimes must be RFC 3339 and null-free."""
    from tests.integration.azure.arm_models import ROUTES
    from tests.integration.azure.fake_azure import FAKED

    faked = {r.key: (r.verb, r.template.split("/Microsoft.Compute/")[1]) for r in ROUTES if r.key in FAKED}
    assert faked == {
        "capacityReservationGroups.createOrUpdate": ("PUT", "capacityReservationGroups/{capacityReservationGroupName}"),
        "capacityReservationGroups.get": ("GET", "capacityReservationGroups/{capacityReservationGroupName}"),
        "capacityReservationGroups.delete": ("DELETE", "capacityReservationGroups/{capacityReservationGroupName}"),
        "capacityReservations.createOrUpdate": ("PUT", f"{GROUP_TEMPLATE}/{{capacityReservationName}}"),
        "capacityReservations.get": ("GET", f"{GROUP_TEMPLATE}/{{capacityReservationName}}"),
        "capacityReservations.delete": ("DELETE", f"{GROUP_TEMPLATE}/{{capacityReservationName}}"),
        "capacityReservations.listByCapacityReservationGroup": ("GET", GROUP_TEMPLATE),
        "usage.list": ("GET", "locations/{location}/usages"),
    }
    assert {r.api_version for r in ROUTES if r.key in FAKED} == {VERSION}
    bad = {"name": "x", "properties": {"timeCreated": "2026-05-01 12:00:00", "provisioningTime": None}}
    probs = check(bad, models.CapacityReservation, "r", response=True)
    assert probs == [
        "r.properties.timeCreated: '2026-05-01 12:00:00' is not an RFC 3339 date-time",
        "r.properties.provisioningTime: null in a response",
    ]
    read = sdk_reads({"properties": {"timeCreated": "yesterday"}}, models.CapacityReservation, "r")
    assert read == ["r.properties.timeCreated: the SDK read 'yesterday', not a datetime"]


def test_the_checker_reads_each_sdk_function_as_inspect_does() -> None:
    """arm_models reads the SDK's sources from each code object's line table (inspect.getsource tokenized the file
    again per function: seconds at every collection); the text is inspect.getsource's, here for every eighth of the
    operations module's functions (request builders and operation methods, decorated ones among them)."""
    import inspect

    from azure.mgmt.compute.operations import _operations as ops

    from tests.integration.azure import arm_models

    fns = [f for name, f in vars(ops).items() if name.startswith("build_") and inspect.isfunction(f)]
    for cname, cls in vars(ops).items():
        if cname.endswith("Operations") and isinstance(cls, type):
            fns += [inspect.unwrap(m) for n, m in vars(cls).items() if inspect.isfunction(m) and not n.startswith("__")]
    assert len(fns) > 500
    lines = arm_models._lines(ops.__file__)
    decorated = [f for f in fns if lines[f.__code__.co_firstlineno - 1].lstrip().startswith("@")][:5]
    for fn in fns[::8] + decorated:
        assert arm_models._source(fn) == inspect.getsource(fn), fn.__qualname__
    assert len(decorated) == 5


def test_usages_are_checked_and_paged(fake_azure: FakeAzure) -> None:
    """The compute usages of a location (``usage.list``): seeded rows answered in pages the SDK reads; a constant the
    SDK fixes (``unit: "Count"``) is checked like any field."""
    from tests.integration.azure.arm_models import check

    fake_azure.set_usage("eastus", "standardNDSH100v5Family", 192, current=96)
    fake_azure.set_usage("eastus", "lowPriorityCores", 480)
    fake_azure.set_page_size(1)
    url = f"{fake_azure.url}/subscriptions/{SUB}/providers/Microsoft.Compute/locations/eastus/usages"
    first = httpx.get(url, params={"api-version": VERSION}, headers=AUTH).json()
    assert [u["name"]["value"] for u in first["value"]] == ["standardNDSH100v5Family"] and "nextLink" in first
    second = httpx.get(first["nextLink"], headers=AUTH).json()
    assert [u["limit"] for u in second["value"]] == [480] and "nextLink" not in second
    assert check({"unit": "Bytes", "currentValue": 1, "limit": 2, "name": {"value": "x"}}, models.Usage, "u",
                 response=True) == ["u.unit: expected one of ['Count'], got str 'Bytes'"]  # fmt: skip
