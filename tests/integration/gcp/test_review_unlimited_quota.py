"""Review (fixed), the defect: an unlimited GCP quota (-1) "gives no reading" (docs/providers.md), so the service's
guard "not above the current quota" has nothing to compare with, and filing an "increase" creates a quota preference
with a finite value: a decrease from unlimited, which Google applies at once (the fake models decreases as applied at
once). gpufleet promises never to lower a quota preference; here it lowers the quota itself."""

from __future__ import annotations

from gpufleet.adapters.gcp.quotas import FAMILY_QUOTA, SERVICE
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_quotas import FakeQuotas
from tests.integration.gcp.test_gcp_quotas import EMAIL, PROJECT, REGION, WHERE


def test_review_filing_on_an_unlimited_quota_does_not_lower_it(quota_server: Start, fake_quotas: FakeQuotas) -> None:
    fake_quotas.set_project_number(PROJECT, "804322181107")
    fake_quotas.set_quota(
        SERVICE,
        FAMILY_QUOTA,
        [
            {"dimensions": {}, "value": 0, "applicable_locations": WHERE},
            {"dimensions": {"gpu_family": "NVIDIA_H100"}, "value": -1, "applicable_locations": WHERE},  # unlimited
        ],
    )
    server = quota_server(gcp_quota_contact_email=EMAIL)
    with server.client("finops_admin", "fiona") as c:
        r = c.post("/v1/quotas/increases", json={"region": REGION, "sku": "h100_80gb", "desired_gpus": 64})
    dims = {"region": REGION, "gpu_family": "NVIDIA_H100"}
    assert fake_quotas.quota_value(SERVICE, FAMILY_QUOTA, dims, PROJECT) == -1, r.text  # before the fix: 64
