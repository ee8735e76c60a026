"""Review (fixed), the defect: a GCP quota preference is global (its region is a dimension), but ``request_status``
answers any preference under whatever ``region`` the caller passes: the answer names the wrong region, and the
service drops the cache of that region instead of the preference's, so a granted increase stays invisible to the
outlook for ``cache_s``."""

from __future__ import annotations

from gpufleet.adapters.gcp.quotas import preference_id
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import FixedClock
from gpufleet.service.cloud_quotas import CloudQuotaService
from tests.integration.conftest import NOW_S
from tests.integration.gcp.fake_quotas import FakeQuotas
from tests.integration.gcp.test_gcp_quotas import H100, REGION, _quotas, _seed

VIEWER = Actor("vic", Role.VIEWER, None)


def test_review_status_under_another_region_names_the_preferences_region(fake_quotas: FakeQuotas) -> None:
    _seed(fake_quotas)
    q = _quotas(fake_quotas)
    service = CloudQuotaService(None, FixedClock(NOW_S), q, cache_s=300)  # type: ignore[arg-type]
    assert service.readings(REGION)[H100.code].value == 16.0  # cached
    q.request_increase(REGION, H100.code, 64, reason="outlook")  # a preference for europe-west4
    pid = preference_id("h100_80gb", "on_demand", REGION, H100.code)
    fake_quotas.decide(pid, 64)  # Google grants it
    got = service.increase_status(VIEWER, "us-central1", pid)  # a configured region, not the preference's
    assert got["region"] == REGION  # before the fix: "us-central1"


def test_review_a_closed_preference_drops_its_own_regions_readings(fake_quotas: FakeQuotas) -> None:
    _seed(fake_quotas)
    q = _quotas(fake_quotas)
    service = CloudQuotaService(None, FixedClock(NOW_S), q, cache_s=300)  # type: ignore[arg-type]
    assert service.readings(REGION)[H100.code].value == 16.0  # cached
    q.request_increase(REGION, H100.code, 64, reason="outlook")
    pid = preference_id("h100_80gb", "on_demand", REGION, H100.code)
    fake_quotas.decide(pid, 64)
    assert service.increase_status(VIEWER, "us-central1", pid)["open"] is False  # closed: "readings dropped"
    assert service.readings(REGION)[H100.code].value == 64.0  # before the fix: 16.0, the stale reading for 300 s
