"""GPU quotas from GCP's Cloud Quotas, against the fake checked by Google's own client library types: the adapter
reads each SKU's quota in a region, files an increase as one quota preference (idempotent, never lowered, a console
preference patched rather than duplicated, a lost answer retried into one), and over HTTP on SQLite and PostgreSQL
the outlook reads the quota, drafts the increase, files it, and reads the granted value back."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpufleet.adapters.gcp.quotas import FAMILY_QUOTA, GLOBAL_QUOTA, SERVICE, GcpCloudQuotas, gpu_quota, preference_id
from gpufleet.adapters.gcp.session import GcpConfig, GoogleApi
from gpufleet.adapters.providers import ProviderTimeout
from gpufleet.domain.errors import ValidationError
from tests.integration.conftest import NOW_S, LiveServer
from tests.integration.gcp.conftest import PROJECT, QUOTA_REGION, Start
from tests.integration.gcp.fake_quotas import FakeQuotas
from tests.integration.test_api_planning import DAY, SKU, _hourly, _ingest

REGION = QUOTA_REGION
WHERE = [REGION, "us-central1"]
H100 = gpu_quota("h100_80gb", "on_demand")
H100_SPOT = gpu_quota("h100_80gb", "spot")
L4 = gpu_quota("l4", "on_demand")
assert H100 is not None and H100_SPOT is not None and L4 is not None
EMAIL = "fleet-oncall@example.com"


def _seed(fake: FakeQuotas, h100: int = 16) -> None:
    fake.set_project_number(PROJECT, "804322181107")  # Google's answers name the project by its number
    fake.set_quota(
        SERVICE,
        FAMILY_QUOTA,
        [
            {"dimensions": {}, "value": 0, "applicable_locations": WHERE},  # every other family: none
            {"dimensions": {"gpu_family": "NVIDIA_H100"}, "value": h100, "applicable_locations": WHERE},
        ],
    )
    fake.set_quota(SERVICE, H100_SPOT.quota_id, [{"dimensions": {}, "value": 8, "applicable_locations": WHERE}],
                   dimensions=["region"])  # fmt: skip
    fake.set_quota(SERVICE, GLOBAL_QUOTA, [{"dimensions": {}, "value": 32, "applicable_locations": ["global"]}],
                   dimensions=[])  # fmt: skip  # the project's ceiling over every region and model
    fake.set_quota(
        SERVICE,
        L4.quota_id,
        [
            {"dimensions": {"region": "us-central1"}, "value": 4, "applicable_locations": ["us-central1"]},
            {"dimensions": {}, "value": 1, "applicable_locations": WHERE},
        ],
        dimensions=["region"],
    )


def _quotas(fake: FakeQuotas, *, email: str | None = EMAIL, **config: Any) -> GcpCloudQuotas:
    cfg = GcpConfig(project=PROJECT, regions=tuple(WHERE), endpoint_url=fake.url, credentials="none", **config)
    return GcpCloudQuotas(GoogleApi(cfg, root=f"{fake.url}/v1/", sleep=lambda _s: None), contact_email=email)


def test_each_skus_quota_is_read_for_the_region(fake_quotas: FakeQuotas) -> None:
    _seed(fake_quotas)
    q = _quotas(fake_quotas)
    here = {r.code: r.value for r in q.read(REGION)}
    assert here == {
        H100.code: 16.0,
        f"{FAMILY_QUOTA}:NVIDIA_H200": 0.0,  # the family quota's catch-all row
        f"{FAMILY_QUOTA}:NVIDIA_B200": 0.0,
        L4.code: 1.0,
        H100_SPOT.code: 8.0,
        GLOBAL_QUOTA: 32.0,  # listed (tier "all"), applied to no pool
    }  # the A100 and the other spot quotas are not in the project: no reading, the stored quota applies
    assert {r.code: r.value for r in q.read("us-central1")}[L4.code] == 4.0
    assert fake_quotas.calls["quotaInfos.get"] == 2 * 9  # one per quota id (the family's shared by three SKUs)
    ref = q.quota_for("h100_80gb", "on_demand")
    assert ref is not None and (ref.unit, ref.units_per_gpu, ref.gpus_per_machine, ref.gpus(16.0)) == ("GPU", 1, 8, 16)


def test_an_increase_is_one_preference_filed_once_and_never_lowered(fake_quotas: FakeQuotas) -> None:
    _seed(fake_quotas)
    q = _quotas(fake_quotas)
    filed = q.request_increase(REGION, H100.code, 64, reason="outlook")
    pid = preference_id("h100_80gb", "on_demand", REGION, H100.code)
    assert (filed.request_id, filed.status, filed.open, filed.desired_value) == (pid, "RECONCILING", True, 64.0)
    sent = fake_quotas.preference(pid)
    assert sent.quota_config.preferred_value == 64 and sent.contact_email == EMAIL
    assert dict(sent.dimensions) == {"region": REGION, "gpu_family": "NVIDIA_H100"}
    assert q.request_increase(REGION, H100.code, 64, reason="outlook").request_id == pid  # again: nothing sent
    assert q.request_increase(REGION, H100.code, 32, reason="outlook").desired_value == 64.0  # never lowered
    assert (fake_quotas.calls["quotaPreferences.create"], fake_quotas.calls["quotaPreferences.patch"]) == (1, 0)
    assert q.request_increase(REGION, H100.code, 128, reason="outlook").desired_value == 128.0
    assert fake_quotas.calls["quotaPreferences.patch"] == 1
    assert [r.request_id for r in q.requests(REGION, H100.code)] == [pid]
    assert q.requests("us-central1", H100.code) == []  # another region's dimensions: another preference
    fake_quotas.decide(pid, 128)
    got = q.request_status(REGION, pid)
    assert (got.status, got.open, got.code) == ("GRANTED", False, H100.code)
    assert {r.code: r.value for r in q.read(REGION)}[H100.code] == 128.0


def test_a_console_preference_is_patched_not_duplicated(fake_quotas: FakeQuotas) -> None:
    _seed(fake_quotas)
    console = {"service": SERVICE, "quotaId": L4.quota_id, "dimensions": {"region": REGION},
               "quotaConfig": {"preferredValue": "2"}, "contactEmail": "someone@example.com"}  # fmt: skip
    r = httpx.post(
        f"{fake_quotas.url}/v1/projects/{PROJECT}/locations/global/quotaPreferences",
        params={"quotaPreferenceId": "made-in-the-console"},
        json=console,
        headers={"Authorization": "Bearer t"},
    )
    assert r.status_code == 200, r.text
    filed = _quotas(fake_quotas).request_increase(REGION, L4.code, 16, reason="outlook")
    assert filed.request_id == "made-in-the-console" and filed.desired_value == 16.0 and filed.open
    assert fake_quotas.preference("made-in-the-console").quota_config.preferred_value == 16
    assert fake_quotas.calls["quotaPreferences.patch"] == 1


class _Racing(GoogleApi):
    """A client whose first patch meets a preference someone changed since it was read (the console raised it)."""

    def __init__(self, *args: Any, fake: FakeQuotas, to: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fake, self._to = fake, to

    def call(self, what: str, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if what == "quotaPreferences.patch" and self._to:
            raised, self._to = {"quotaConfig": {"preferredValue": str(self._to)}, "contactEmail": "x@example.com"}, 0
            r = httpx.patch(
                f"{self._fake.url}/v1/projects/{PROJECT}/{path}",
                params={"updateMask": "quotaConfig.preferredValue,contactEmail"},
                json=raised,
                headers={"Authorization": "Bearer console"},
            )
            assert r.status_code == 200, r.text
        return super().call(what, method, path, **kw)


@pytest.mark.parametrize(("console", "patches"), [(24, 2), (128, 1)])
def test_a_preference_changed_under_the_patch_is_read_again(
    fake_quotas: FakeQuotas, console: int, patches: int
) -> None:
    """Refused ABORTED (a stale etag), the preference is read again: still below the need, patched with the new
    etag; already above it (someone asked for more), left alone."""
    _seed(fake_quotas)
    q = _quotas(fake_quotas)
    pid = preference_id("l4", "on_demand", REGION, L4.code)
    q.request_increase(REGION, L4.code, 8, reason="outlook")
    cfg = GcpConfig(project=PROJECT, regions=tuple(WHERE), endpoint_url=fake_quotas.url, credentials="none")
    racing = _Racing(cfg, root=f"{fake_quotas.url}/v1/", fake=fake_quotas, to=console)
    filed = GcpCloudQuotas(racing, contact_email=EMAIL).request_increase(REGION, L4.code, 64, reason="outlook")
    assert filed.request_id == pid and filed.desired_value == max(64, console)
    assert fake_quotas.preference(pid).quota_config.preferred_value == max(64, console)
    assert fake_quotas.calls["quotaPreferences.patch"] == 1 + patches  # the console's, then ours


def test_a_lost_answer_is_retried_into_one_preference(fake_quotas: FakeQuotas) -> None:
    _seed(fake_quotas)
    fake_quotas.delay_next("quotaPreferences.create", 1.5)  # performed; its answer comes after our read timeout
    q = _quotas(fake_quotas, read_timeout_s=0.5)
    filed = q.request_increase(REGION, H100_SPOT.code, 32, reason="outlook")
    pid = preference_id("h100_80gb", "spot", REGION, H100_SPOT.code)
    assert (filed.request_id, filed.desired_value, filed.open) == (pid, 32.0, True)
    assert fake_quotas.calls["quotaPreferences.create"] == 2  # the retry is refused ALREADY_EXISTS, then found
    listed = httpx.get(
        f"{fake_quotas.url}/v1/projects/{PROJECT}/locations/global/quotaPreferences",
        headers={"Authorization": "Bearer t"},
    ).json()
    assert len(listed["quotaPreferences"]) == 1


def test_no_contact_email_no_increase_and_throttling_is_retried(fake_quotas: FakeQuotas) -> None:
    _seed(fake_quotas)
    with pytest.raises(ValidationError) as err:
        _quotas(fake_quotas, email=None).request_increase(REGION, H100.code, 64, reason="outlook")
    assert err.value.field == "gcp_quota_contact_email" and not fake_quotas.calls
    fake_quotas.throttle_next("quotaInfos.get", 2)
    assert len(_quotas(fake_quotas).read(REGION)) == 6
    fake_quotas.throttle_next("quotaInfos.get", 3)
    with pytest.raises(ProviderTimeout):  # every attempt throttled: the outcome of a read is unknown
        _quotas(fake_quotas).read(REGION)
    with pytest.raises(ValidationError) as unknown:
        _quotas(fake_quotas).request_status(REGION, "nobody-made-this")
    assert unknown.value.field == "request_id"
    with pytest.raises(ValidationError) as walking:  # never a path of its own at the provider
        _quotas(fake_quotas).request_status(REGION, "../services/x")
    assert walking.value.field == "request_id" and fake_quotas.calls["quotaPreferences.get"] == 1


# ---- over HTTP, on SQLite and PostgreSQL ------------------------------------------------------------------------
def _pool(server: LiveServer, tier: str) -> dict[str, Any]:
    with server.client("viewer", "vic") as v:
        out = v.get("/v1/quotas/outlook", params={"sku": SKU, "days": 60})
    assert out.status_code == 200, out.text
    return next(p for p in out.json()["pools"] if p["pool"] == f"gcp/{REGION}/{SKU}/{tier}")


def test_the_outlook_reads_gcp_quotas_and_files_the_increase(quota_server: Start, fake_quotas: FakeQuotas) -> None:
    _seed(fake_quotas)
    server = quota_server(gcp_quota_contact_email=EMAIL)
    _ingest(server, _hourly(NOW_S - 28 * DAY, 28, [4 + 0.5 * d for d in range(28)]))
    with server.client("viewer", "vic") as v:
        read = v.get("/v1/quotas", params={"region": REGION}).json()
    listed = {q["code"]: (q["tier"], q["unit"], q["value"]) for q in read["quotas"]}
    assert read["provider"] == "gcp" and listed[H100.code] == ("on_demand", "GPU", 16.0)
    assert listed[GLOBAL_QUOTA] == ("all", "GPU", 32.0)  # the project's ceiling, listed as a warning
    pool = _pool(server, "on_demand")
    assert pool["quota_source"] == "cloud_quotas" and pool["quota_gpus"] == 16  # read, not the stored 4
    assert _pool(server, "spot")["quota_gpus"] == 8
    inc = pool["increase"]
    assert inc["unit"] == "GPU" and inc["current_value"] == 16.0 and inc["due"] is True
    assert inc["desired_gpus"] % 8 == 0 and inc["desired_value"] == inc["desired_gpus"] >= pool["peak_demand_gpus"]
    assert inc["turnaround_source"] == "increase_lead_days"

    with server.client("viewer", "vic") as v:
        assert (
            v.post("/v1/quotas/increases", json={"region": REGION, "sku": SKU, "desired_gpus": 64}).status_code == 403
        )
    with server.client("ml_platform_admin", "bob") as c:
        assert c.post("/v1/quotas/increases:file-due").status_code == 409  # filing drafts is off by default
        low = c.post("/v1/quotas/increases", json={"region": REGION, "sku": SKU, "desired_gpus": 16})
        assert low.status_code == 422 and low.json()["field"] == "desired_gpus"  # not above the quota
        filed = c.post("/v1/quotas/increases", json={"region": REGION, "sku": SKU, "desired_gpus": inc["desired_gpus"]})
    assert filed.status_code == 201, filed.text
    req = filed.json()
    assert (req["status"], req["unit"], req["desired_value"]) == ("RECONCILING", "GPU", inc["desired_gpus"])
    pending = _pool(server, "on_demand")["increase"]
    assert pending["reason"] == "request_open" and pending["open_request"]["request_id"] == req["request_id"]

    fake_quotas.decide(req["request_id"], inc["desired_gpus"])
    with server.client("viewer", "vic") as v:
        status = v.get(f"/v1/quotas/increases/{req['request_id']}", params={"region": REGION}).json()
        events = v.get("/v1/audit", params={"action": "quota.increase_requested"}).json()
    assert status["status"] == "GRANTED" and status["open"] is False
    assert _pool(server, "on_demand")["quota_gpus"] == inc["desired_gpus"]  # the granted value, read back
    assert [e["entity_id"] for e in events] == [f"gcp/{REGION}/{H100.code}"]


def test_drafted_gcp_increases_are_filed_when_configured(quota_server: Start, fake_quotas: FakeQuotas) -> None:
    _seed(fake_quotas)
    server = quota_server(gcp_quota_contact_email=EMAIL, gcp_file_quota_increases=True)
    _ingest(server, _hourly(NOW_S - 28 * DAY, 28, [4 + 0.5 * d for d in range(28)]))
    with server.client("finops_admin", "fiona") as c:
        first = c.post("/v1/quotas/increases:file-due", params={"days": 60})
        assert first.status_code == 200, first.text
        assert {f["code"] for f in first.json()["filed"]} == {H100.code, H100_SPOT.code}
        assert c.post("/v1/quotas/increases:file-due", params={"days": 60}).json()["filed"] == []  # open covers it
    assert fake_quotas.calls["quotaPreferences.create"] == 2


def test_without_a_contact_email_an_increase_is_refused_naming_the_setting(
    quota_server: Start, fake_quotas: FakeQuotas
) -> None:
    _seed(fake_quotas)
    server = quota_server()
    with server.client("finops_admin", "fiona") as c:
        r = c.post("/v1/quotas/increases", json={"region": REGION, "sku": SKU, "desired_gpus": 64})
    assert r.status_code == 422 and r.json()["field"] == "gcp_quota_contact_email", r.text
    assert fake_quotas.calls["quotaPreferences.create"] == 0
    with server.client("viewer", "vic") as v:  # a request id that would walk the provider's URL: refused here
        for rid in ("..%2F..%2Fservices%2Fx", "a%3Fkey%3Dv", "x" * 65):
            bad = v.get(f"/v1/quotas/increases/{rid}", params={"region": REGION})
            assert bad.status_code in (404, 422) and "Traceback" not in bad.text, (rid, bad.text)
    assert fake_quotas.calls["quotaPreferences.get"] == 0


def test_a_declined_preference_is_not_filed_again_by_itself_but_a_person_asks_again(
    quota_server: Start, fake_quotas: FakeQuotas
) -> None:
    _seed(fake_quotas)
    server = quota_server(gcp_quota_contact_email=EMAIL, gcp_file_quota_increases=True)
    _ingest(server, _hourly(NOW_S - 28 * DAY, 28, [4 + 0.5 * d for d in range(28)]))
    with server.client("finops_admin", "fiona") as c:
        filed = c.post("/v1/quotas/increases:file-due", params={"days": 60}).json()["filed"]
    asked = next(f for f in filed if f["code"] == H100.code)
    fake_quotas.decide(asked["request_id"], 16)  # Google keeps the quota where it was: declined
    with server.client("viewer", "vic") as v:
        seen = v.get(f"/v1/quotas/increases/{asked['request_id']}", params={"region": REGION}).json()
    assert (seen["status"], seen["open"]) == ("NOT_GRANTED", False)
    inc = _pool(server, "on_demand")["increase"]
    assert (inc["due"], inc["reason"], inc["open_request"]) == (False, "declined", None)
    assert inc["declined_request"] == {
        "request_id": asked["request_id"],
        "status": "NOT_GRANTED",
        "desired_value": asked["desired_value"],
    }
    patches = fake_quotas.calls["quotaPreferences.patch"]
    with server.client("finops_admin", "fiona") as c:
        again = c.post("/v1/quotas/increases:file-due", params={"days": 60}).json()["filed"]
        assert H100.code not in {f["code"] for f in again}  # not asked again by itself
        assert fake_quotas.calls["quotaPreferences.patch"] == patches
        same = c.post("/v1/quotas/increases", json={"region": REGION, "sku": SKU, "desired_gpus": inc["desired_gpus"]})
        # the fake treats the same value as no new request (Google's behaviour there is not documented): said so
        assert same.status_code == 409 and "declined" in same.json()["detail"], same.text
        more = inc["desired_gpus"] + 8
        by_hand = c.post("/v1/quotas/increases", json={"region": REGION, "sku": SKU, "desired_gpus": more})
    assert by_hand.status_code == 201, by_hand.text
    assert (by_hand.json()["request_id"], by_hand.json()["status"]) == (asked["request_id"], "RECONCILING")
    assert fake_quotas.calls["quotaPreferences.patch"] == patches + 2  # the preference asked anew
    assert fake_quotas.preference(asked["request_id"]).reconciling
    reopened = _pool(server, "on_demand")["increase"]
    assert (reopened["reason"], reopened["declined_request"]) == ("request_open", None)
