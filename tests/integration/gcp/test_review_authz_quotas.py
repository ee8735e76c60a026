"""Review (authz): who may ask gpufleet to file the quota increases the outlook drafted (``POST
/v1/quotas/increases:file-due``), on SQLite and PostgreSQL against the fake Cloud Quotas API."""

from __future__ import annotations

from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_quotas import FakeQuotas
from tests.integration.gcp.test_gcp_quotas import EMAIL, _seed


def test_a_viewer_may_not_ask_to_file_the_drafted_increases(quota_server: Start, fake_quotas: FakeQuotas) -> None:
    """Review (fixed), the defect: filing is an admin's write (docs/api.md: "read: admins, viewer; file: admins"), but
    the route ran the outlook for any reader (it reads the provider's quotas) and the role was checked only by the first
    increase it filed: with nothing due a viewer's request answered 200 ``{"filed": []}``, as if a viewer might file.
    Now the route refuses every role but the admins first (403), before it reads anything."""
    _seed(fake_quotas)
    server = quota_server(gcp_quota_contact_email=EMAIL, gcp_file_quota_increases=True)
    with server.client("viewer", "vic") as viewer:
        r = viewer.post("/v1/quotas/increases:file-due", params={"days": 60})
    assert r.status_code == 403, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert fake_quotas.calls["quotaPreferences.create"] == 0
    with server.client("finops_admin", "fiona") as admin:  # an admin still may (nothing is due: nothing filed)
        assert admin.post("/v1/quotas/increases:file-due", params={"days": 60}).json() == {"filed": []}
