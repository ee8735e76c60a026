"""The Cloud Quotas fake itself, driven with plain httpx: its behaviour, and that its checker catches what breaks
Google's types (those tests look at ``violations`` and then empty it, so the fixture's final check passes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google.api_core.client_options import ClientOptions
from google.cloud import cloudquotas_v1
from google.cloud.cloudquotas_v1.types import cloudquotas, resources
from google.oauth2.credentials import Credentials
from google.protobuf.field_mask_pb2 import FieldMask

from tests.integration.gcp.fake_quotas import FakeQuotas
from tests.integration.gcp.quotas_api import check

PROJECT = "fleet-prod"
SERVICE = "compute.googleapis.com"
GPUS = "GPUS-PER-GPU-FAMILY-per-project-region"
H100 = {"region": "us-central1", "gpu_family": "NVIDIA_H100"}
AUTH = {"Authorization": "Bearer test-token"}
PREFS = "quotaPreferences"


@pytest.fixture
def client(fake_quotas: FakeQuotas) -> Iterator[httpx.Client]:
    fake_quotas.set_quota(
        SERVICE,
        GPUS,
        [
            {"dimensions": H100, "value": 8, "applicable_locations": ["us-central1"]},
            {"dimensions": {"region": "us-central1"}, "value": 4, "applicable_locations": ["us-central1"]},
            {"dimensions": {}, "value": 0, "applicable_locations": ["us-central1", "us-east1"]},
        ],
    )
    base = f"{fake_quotas.url}/v1/projects/{PROJECT}/locations/global/"
    with httpx.Client(base_url=base, headers=AUTH, timeout=10) as c:
        yield c


def pref(value: str = "16", dims: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    body = {"service": SERVICE, "quotaId": GPUS, "dimensions": H100 if dims is None else dims}
    return body | {"quotaConfig": {"preferredValue": value}, "contactEmail": "ops@example.com"} | extra


def create(client: httpx.Client, pid: str, body: dict[str, Any]) -> httpx.Response:
    return client.post(PREFS, params={"quotaPreferenceId": pid}, json=body)


def taken(fake: FakeQuotas) -> list[str]:
    """The violations recorded so far, emptied (the test expected them)."""
    out = list(fake.violations)
    fake.violations.clear()
    return out


def status(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["status"]


def test_create_get_patch_list_round_trip(fake_quotas: FakeQuotas, client: httpx.Client) -> None:
    r = create(client, "h100-us-central1", pref(justification="training"))
    assert r.status_code == 200, r.text
    made = resources.QuotaPreference.from_json(r.text, ignore_unknown_fields=False)
    assert made.name == f"projects/{PROJECT}/locations/global/quotaPreferences/h100-us-central1"
    assert made.reconciling and made.quota_config.preferred_value == 16 and made.quota_config.trace_id
    assert made.etag and made.create_time and made.update_time and made.dimensions == H100
    assert "contactEmail" not in r.json() and r.json()["quotaConfig"]["preferredValue"] == "16"
    assert r.json()["createTime"].endswith("Z") and "grantedValue" not in r.json()["quotaConfig"]
    got = client.get(f"{PREFS}/h100-us-central1")
    assert got.json() == r.json()
    body = {"quotaConfig": {"preferredValue": "24"}, "contactEmail": "ops@example.com", "etag": made.etag}
    q = {"updateMask": "quotaConfig.preferredValue,contactEmail"}
    r = client.patch(f"{PREFS}/h100-us-central1", params=q, json=body)
    assert r.status_code == 200, r.text
    patched = resources.QuotaPreference.from_json(r.text, ignore_unknown_fields=False)
    assert patched.quota_config.preferred_value == 24 and patched.justification == "training"
    assert patched.etag != made.etag and patched.quota_config.trace_id != made.quota_config.trace_id
    listed = client.get(PREFS, params={"pageSize": 10, "orderBy": "quota_id"})
    page = cloudquotas.ListQuotaPreferencesResponse.from_json(listed.text, ignore_unknown_fields=False)
    assert [p.name for p in page.quota_preferences] == [patched.name] and not page.next_page_token
    info = client.get(f"services/{SERVICE}/quotaInfos/{GPUS}")
    parsed = resources.QuotaInfo.from_json(info.text, ignore_unknown_fields=False)
    assert parsed.container_type == resources.QuotaInfo.ContainerType.PROJECT and parsed.dimensions == list(H100)
    assert [dict(d.dimensions) for d in parsed.dimensions_infos] == [H100, {"region": "us-central1"}, {}]
    assert info.json()["dimensionsInfos"][0]["details"] == {"value": "8"}
    assert info.json()["dimensionsInfos"][2]["details"] == {}  # a value of 0 is left out, as proto3 JSON does
    assert fake_quotas.calls == {
        "quotaPreferences.create": 1,
        "quotaPreferences.get": 1,
        "quotaPreferences.patch": 1,
        "quotaPreferences.list": 1,
        "quotaInfos.get": 1,
    }
    assert fake_quotas.preference("h100-us-central1").contact_email == "ops@example.com"
    assert fake_quotas.violations == []


def test_googles_own_client_library_is_served_without_a_violation(
    fake_quotas: FakeQuotas, client: httpx.Client
) -> None:
    """The library's REST transport (its routes, ``$alt=json;enum-encoding=int``, numeric enums in the query, int64
    as strings, the update mask in lowerCamel) against the fake: every call answered, every answer parsed."""
    lib = cloudquotas_v1.CloudQuotasClient(
        credentials=Credentials(token="test-token"),  # type: ignore[no-untyped-call]
        transport="rest",
        client_options=ClientOptions(api_endpoint=fake_quotas.url),
    )
    parent = f"projects/{PROJECT}/locations/global"
    want = resources.QuotaPreference(
        service=SERVICE,
        quota_id=GPUS,
        dimensions=H100,
        quota_config=resources.QuotaConfig(preferred_value=16),
        contact_email="ops@example.com",
    )
    made = lib.create_quota_preference(parent=parent, quota_preference_id="h100", quota_preference=want)
    assert made.reconciling and lib.get_quota_preference(name=made.name).etag == made.etag
    change = resources.QuotaPreference(
        name=made.name, etag=made.etag, quota_config=resources.QuotaConfig(preferred_value=6)
    )
    request = cloudquotas.UpdateQuotaPreferenceRequest(
        quota_preference=change,
        update_mask=FieldMask(paths=["quota_config.preferred_value"]),
        ignore_safety_checks=[resources.QuotaSafetyCheck.QUOTA_DECREASE_PERCENTAGE_TOO_HIGH],
    )
    done = lib.update_quota_preference(request=request)
    assert not done.reconciling and done.quota_config.granted_value == 6
    assert [p.name for p in lib.list_quota_preferences(parent=parent)] == [made.name]
    info = lib.get_quota_info(name=f"{parent}/services/{SERVICE}/quotaInfos/{GPUS}")
    assert info.container_type == resources.QuotaInfo.ContainerType.PROJECT
    assert [i.quota_id for i in lib.list_quota_infos(parent=f"{parent}/services/{SERVICE}")] == [GPUS]
    assert fake_quotas.requests[0][1] == {"quotaPreferenceId": "h100", "$alt": "json;enum-encoding=int"}
    assert fake_quotas.violations == []


def test_a_decrease_is_applied_at_once(fake_quotas: FakeQuotas, client: httpx.Client) -> None:
    r = create(client, "h100-down", pref("6", contactEmail=None))
    assert r.status_code == 200, r.text
    assert "reconciling" not in r.json() and r.json()["quotaConfig"]["grantedValue"] == "6"
    assert "traceId" not in r.json()["quotaConfig"]
    assert fake_quotas.quota_value(SERVICE, GPUS, H100, PROJECT) == 6
    r = create(client, "a100", pref("4", {"region": "us-central1", "gpu_family": "NVIDIA_A100"}))  # 4 is in effect
    assert r.json()["quotaConfig"]["grantedValue"] == "4" and "reconciling" not in r.json()


def test_decide_ends_reconciling_and_changes_the_quota_info(fake_quotas: FakeQuotas, client: httpx.Client) -> None:
    dims = {"region": "us-east1", "gpu_family": "NVIDIA_H100"}
    assert create(client, "east", pref("12", dims)).status_code == 200
    assert fake_quotas.quota_value(SERVICE, GPUS, dims, PROJECT) == 0
    fake_quotas.decide("east", 10)
    got = client.get(f"{PREFS}/east").json()
    assert "reconciling" not in got and got["quotaConfig"]["grantedValue"] == "10"
    assert got["quotaConfig"]["stateDetail"]
    info = client.get(f"services/{SERVICE}/quotaInfos/{GPUS}").json()
    row = next(d for d in info["dimensionsInfos"] if d.get("dimensions") == dims)
    assert row == {"dimensions": dims, "details": {"value": "10"}, "applicableLocations": ["us-east1"]}
    assert create(client, "h100", pref("20")).status_code == 200
    fake_quotas.decide("h100", 20)
    rows = client.get(f"services/{SERVICE}/quotaInfos/{GPUS}").json()["dimensionsInfos"]
    assert [d["details"]["value"] for d in rows if d.get("dimensions") == H100] == ["20"]  # replaced, not added


def test_one_preference_per_dimensions_and_per_id(client: httpx.Client) -> None:
    assert create(client, "first", pref()).status_code == 200
    assert status(create(client, "second", pref("32"))) == (409, "ALREADY_EXISTS")
    other = {"region": "us-east1", "gpu_family": "NVIDIA_H100"}
    assert status(create(client, "first", pref(dims=other))) == (409, "ALREADY_EXISTS")
    assert create(client, "second", pref(dims=other)).status_code == 200


def test_google_refusals_are_not_violations(fake_quotas: FakeQuotas, client: httpx.Client) -> None:
    r = create(client, "no-email", pref("16", contactEmail=None))
    assert status(r) == (400, "INVALID_ARGUMENT") and "contact_email" in r.json()["error"]["message"]
    assert status(create(client, "no-service", {k: v for k, v in pref().items() if k != "service"}))[0] == 400
    assert status(create(client, "no-value", pref() | {"quotaConfig": {}})) == (400, "INVALID_ARGUMENT")
    assert status(create(client, "user", pref(dims={"user": "me"}))) == (400, "INVALID_ARGUMENT")
    assert status(client.get(f"{PREFS}/nope")) == (404, "NOT_FOUND")
    assert status(client.get(f"services/{SERVICE}/quotaInfos/NOPE")) == (404, "NOT_FOUND")
    assert status(client.get(f"{client.base_url}".replace("global", "us-east1") + PREFS)) == (400, "INVALID_ARGUMENT")
    r = httpx.get(f"{client.base_url}{PREFS}/nope")  # no token
    assert status(r) == (401, "UNAUTHENTICATED")
    assert fake_quotas.violations == []


def test_stale_etag_is_aborted(client: httpx.Client) -> None:
    create(client, "h100", pref())
    body = {"quotaConfig": {"preferredValue": "20"}, "contactEmail": "a@example.com", "etag": "stale"}
    r = client.patch(f"{PREFS}/h100", params={"updateMask": "quotaConfig"}, json=body)
    assert status(r) == (409, "ABORTED")


def test_patch_allow_missing_and_validate_only(fake_quotas: FakeQuotas, client: httpx.Client) -> None:
    assert status(client.patch(f"{PREFS}/h100", json=pref())) == (404, "NOT_FOUND")
    r = client.patch(f"{PREFS}/h100", params={"allowMissing": "true", "validateOnly": "true"}, json=pref())
    assert r.status_code == 200 and r.json()["reconciling"] is True
    assert status(client.get(f"{PREFS}/h100"))[0] == 404  # validateOnly: nothing made
    r = client.patch(f"{PREFS}/h100", params={"allowMissing": "true"}, json=pref())
    assert r.status_code == 200 and client.get(f"{PREFS}/h100").json() == r.json()
    etag = r.json()["etag"]
    r = client.patch(f"{PREFS}/h100", params={"validateOnly": "true"}, json=pref("2"))
    assert r.json()["quotaConfig"]["grantedValue"] == "2"  # the would-be result ...
    assert client.get(f"{PREFS}/h100").json()["etag"] == etag  # ... and nothing changed
    assert fake_quotas.quota_value(SERVICE, GPUS, H100, PROJECT) == 8
    r = client.patch(f"{PREFS}/h100", params={"updateMask": "justification"}, json={"justification": "why"})
    assert r.json()["justification"] == "why" and r.json()["quotaConfig"]["preferredValue"] == "16"
    moved = pref(dims={"region": "us-east1", "gpu_family": "NVIDIA_H100"})
    assert status(client.patch(f"{PREFS}/h100", json=moved)) == (400, "INVALID_ARGUMENT")  # dimensions: immutable
    assert fake_quotas.calls["quotaPreferences.patch"] == 6 and fake_quotas.violations == []


def test_lists_page(fake_quotas: FakeQuotas, client: httpx.Client) -> None:
    for n, family in enumerate(["A100", "H100", "L4"]):
        dims = {"region": "us-east1", "gpu_family": f"NVIDIA_{family}"}
        assert create(client, f"p{n}", pref("1", dims)).status_code == 200
    first = client.get(PREFS, params={"pageSize": 2}).json()
    assert [p["name"].rpartition("/")[2] for p in first["quotaPreferences"]] == ["p0", "p1"]
    rest = client.get(PREFS, params={"pageSize": 2, "pageToken": first["nextPageToken"]}).json()
    assert [p["name"].rpartition("/")[2] for p in rest["quotaPreferences"]] == ["p2"] and "nextPageToken" not in rest
    assert status(client.get(PREFS, params={"pageToken": "garbage"})) == (400, "INVALID_ARGUMENT")
    for quota_id in ("CPUS-per-project-region", "INSTANCES-per-project-region"):
        fake_quotas.set_quota(SERVICE, quota_id, [{"value": 24}], dimensions=["region"])
    fake_quotas.set_quota("tpu.googleapis.com", "TPUS", [{"value": 1}])
    first = client.get(f"services/{SERVICE}/quotaInfos", params={"pageSize": 2}).json()
    rest = client.get(f"services/{SERVICE}/quotaInfos", params={"pageToken": first["nextPageToken"]}).json()
    ids = [i["quotaId"] for i in first["quotaInfos"] + rest["quotaInfos"]]
    assert ids == ["CPUS-per-project-region", GPUS, "INSTANCES-per-project-region"] and "nextPageToken" not in rest


def test_a_project_by_id_or_number_is_one_table(fake_quotas: FakeQuotas, client: httpx.Client) -> None:
    fake_quotas.set_project_number(PROJECT, "123456")
    r = create(client, "h100", pref())
    assert r.json()["name"] == "projects/123456/locations/global/quotaPreferences/h100"
    by_number = f"{fake_quotas.url}/v1/projects/123456/locations/global/{PREFS}/h100"
    assert client.get(by_number).json() == r.json()
    other = f"{fake_quotas.url}/v1/projects/other/locations/global/{PREFS}"
    assert client.get(other).json() == {}  # another project: its own, empty table


def test_throttle_and_delay(fake_quotas: FakeQuotas, client: httpx.Client) -> None:
    fake_quotas.throttle_next("quotaPreferences.create")
    assert status(create(client, "h100", pref())) == (429, "RESOURCE_EXHAUSTED")
    fake_quotas.delay_next("quotaPreferences.create", 1.0)
    with pytest.raises(httpx.ReadTimeout):
        client.post(PREFS, params={"quotaPreferenceId": "h100"}, json=pref(), timeout=0.3)
    assert fake_quotas.preference("h100").reconciling  # performed, answered late
    assert status(create(client, "h100", pref())) == (409, "ALREADY_EXISTS")
    assert fake_quotas.calls["quotaPreferences.create"] == 3


@pytest.mark.parametrize(
    ("body", "params", "expect"),
    [
        (pref(colour="blue"), {}, 'has no field named "colour"'),
        (pref(service=7), {}, "Failed to parse service field"),
        (pref(quotaConfig={"preferredValue": 16}), {}, "preferredValue: an int64 must be sent as a JSON string"),
        (pref(reconciling=True), {}, "body.reconciling: output-only field sent by the client"),
        (pref(createTime="2030-01-01T00:00:00Z"), {}, "body.createTime: output-only field sent by the client"),
        (pref(quotaConfig={"preferredValue": "1", "traceId": "t"}), {}, "traceId: output-only field"),
        (pref(quotaConfig={"preferredValue": "1", "grantedValue": "1"}), {}, "grantedValue: output-only field"),
        ({**pref(), "quota_id": GPUS}, {}, "the proto field name; Google's JSON name is quotaId"),
        (pref(), {"quotaPreferenceId": "x", "validateOnly": "true"}, "unknown query parameter validateOnly"),
        (pref(), {"quotaPreferenceId": "x", "quota_preference_id": "x"}, "unknown query parameter quota_preference_id"),
        (pref(), {"quotaPreferenceId": "x", "ignoreSafetyChecks": "NOPE"}, "is not one of"),
    ],
)
def test_checker_catches_malformed_creates(
    fake_quotas: FakeQuotas, client: httpx.Client, body: dict[str, Any], params: dict[str, str], expect: str
) -> None:
    r = client.post(PREFS, params=params, json=body)
    assert status(r) == (400, "INVALID_ARGUMENT")
    found = taken(fake_quotas)
    assert any(expect in v for v in found), found
    assert fake_quotas.prefs == {}


def test_checker_catches_bad_paths_queries_and_filters(fake_quotas: FakeQuotas, client: httpx.Client) -> None:
    assert client.get(PREFS, params={"filter": "reconciling=true"}).status_code == 400
    assert client.get(PREFS, params={"pageSize": "many"}).status_code == 400
    assert client.get(f"{PREFS}/x", params={"view": "FULL"}).status_code == 400
    assert client.patch(f"{PREFS}/x", params={"updateMask": "quotaConfig.grantedValue"}, json=pref()).status_code == 400
    assert client.patch(f"{PREFS}/x", params={"allowMissing": "yes"}, json=pref()).status_code == 400
    assert client.get(f"{PREFS}/x", params={"$alt": "proto"}).status_code == 400
    assert client.delete(f"{PREFS}/x").status_code == 404  # no such route in the library
    assert client.get(f"services/{SERVICE}/quotaLimits").status_code == 404
    assert client.get(f"{fake_quotas.url}/v1/folders/9/locations/global/{PREFS}").status_code == 404  # not faked
    found = taken(fake_quotas)
    assert len(found) == 9, found
    assert "the fake does not implement filter" in found[0] and "is not an int32" in found[1]
    assert "unknown query parameter view" in found[2] and "is not a field a client sets" in found[3]
    assert "is not true/false" in found[4] and "$alt='proto' is not one of" in found[5]
    assert found[6].startswith("no route") and found[7].startswith("no route")
    assert found[8].startswith("quotaPreferences.list on /v1/{parent=folders/*/locations/*}/quotaPreferences")


def test_numeric_enums_when_asked(client: httpx.Client) -> None:
    r = client.get(f"services/{SERVICE}/quotaInfos/{GPUS}", params={"$alt": "json;enum-encoding=int"})
    assert r.json()["containerType"] == 1
    assert client.get(f"services/{SERVICE}/quotaInfos/{GPUS}").json()["containerType"] == "PROJECT"


def test_checker_catches_a_bad_response() -> None:
    bad: dict[str, Any] = {
        "name": "projects/p/locations/global/quotaPreferences/x",
        "quotaConfig": {"preferredValue": 16, "grantedValue": "x", "requestOrigin": 2},
        "createTime": "2030-01-01T00:00:00+01:00",
        "contactEmail": "ops@example.com",
        "justification": None,
    }
    found = check(bad, resources.QuotaPreference, "qp", response=True)
    assert len(found) == 1 and "Failed to parse grantedValue field" in found[0]  # protobuf's own parser first
    bad["quotaConfig"]["grantedValue"] = "3"
    found = check(bad, resources.QuotaPreference, "qp", response=True)
    for expect in (
        "qp.quotaConfig.preferredValue: an int64 must be sent as a JSON string",
        "qp.quotaConfig.requestOrigin: enum by number (2)",
        "qp.createTime: '2030-01-01T00:00:00+01:00' is not an RFC 3339 time in UTC (Z)",
        "qp.contactEmail: input-only field in a response",
        "qp.justification: null in a response",
    ):
        assert any(v.startswith(expect) for v in found), (expect, found)
    assert (
        check(
            {"reconciling": True, "createTime": "2030-01-01T00:00:00Z"}, resources.QuotaPreference, "qp", response=True
        )
        == []
    )
