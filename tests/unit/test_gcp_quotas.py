"""The pure parts of the GCP quota adapter: which quota bounds a SKU, a region's value from a quota's dimension
rows, preference ids and the status of a preference."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.adapters.gcp.quotas import (
    FAMILY_QUOTA,
    MODELS,
    QUOTA_BY_CODE,
    _request,
    gpu_quota,
    preference_id,
    region_value,
)


def test_which_quota_bounds_each_sku() -> None:
    h100 = gpu_quota("h100_80gb", "on_demand")
    assert h100 is not None and (h100.quota_id, h100.family) == (FAMILY_QUOTA, "NVIDIA_H100")
    assert h100.dimensions("us-central1") == {"region": "us-central1", "gpu_family": "NVIDIA_H100"}
    l4 = gpu_quota("l4", "on_demand")
    assert l4 is not None and (l4.quota_id, l4.family) == ("NVIDIA-L4-GPUS-per-project-region", None)
    spot = gpu_quota("a100_80gb", "spot")
    assert spot is not None and spot.quota_id == "PREEMPTIBLE-NVIDIA-A100-80GB-GPUS-per-project-region"
    assert gpu_quota("l40s", "on_demand") is None  # GCP sells no L40S
    assert gpu_quota("h100_80gb", "reserved") is None
    assert len(QUOTA_BY_CODE) == 2 * len(MODELS)  # every SKU and tier its own code, the family quota included


def _row(value: int, where: list[str], **dims: str) -> dict[str, object]:
    return {"dimensions": dims, "details": {"value": str(value)}, "applicableLocations": where}


def test_the_most_specific_row_that_matches_gives_the_value() -> None:
    info = {
        "dimensionsInfos": [
            _row(0, ["us-central1", "europe-west4"]),  # every family, every region without a row of its own
            _row(8, ["us-central1", "europe-west4"], gpu_family="NVIDIA_H100"),
            _row(64, ["us-central1"], region="us-central1", gpu_family="NVIDIA_H100"),
            _row(16, ["us-central1"], region="us-central1", gpu_family="NVIDIA_B200"),
        ]
    }
    assert region_value(info, "us-central1", "NVIDIA_H100") == 64
    assert region_value(info, "europe-west4", "NVIDIA_H100") == 8
    assert region_value(info, "europe-west4", "NVIDIA_H200") == 0
    assert region_value(info, "us-central1", "NVIDIA_B200") == 16
    assert region_value(info, "asia-east1", "NVIDIA_H100") is None  # no row applies there
    assert region_value({"dimensionsInfos": [_row(-1, ["us-central1"])]}, "us-central1", None) is None  # unlimited
    assert region_value({}, "us-central1", None) is None


@given(st.lists(st.tuples(st.integers(0, 10_000), st.booleans(), st.booleans()), max_size=6))
def test_a_row_of_another_region_or_family_never_counts(rows: list[tuple[int, bool, bool]]) -> None:
    info = {
        "dimensionsInfos": [
            _row(v, ["europe-west4"], region="europe-west4" if other_region else "us-central1", gpu_family="NVIDIA_L4")
            if other_family
            else _row(v, ["europe-west4"], region="europe-west4")
            for v, other_region, other_family in rows
        ]
    }
    assert region_value(info, "us-central1", "NVIDIA_H100") is None


def test_preference_ids_are_legal_and_distinct() -> None:
    ids = {
        preference_id(sku, tier, region, code)
        for code, (tier, q) in QUOTA_BY_CODE.items()
        for sku in MODELS
        if gpu_quota(sku, tier) == q
        for region in ("us-central1", "europe-west4")
    }
    assert len(ids) == 2 * len(QUOTA_BY_CODE)
    assert all(re.fullmatch(r"[a-z][a-z0-9-]{0,62}", i) for i in ids), ids


def test_a_preference_reads_as_a_request() -> None:
    base = {
        "name": "projects/p/locations/global/quotaPreferences/gpufleet-x",
        "createTime": "2026-12-01T00:00:00Z",
        "updateTime": "2026-12-02T00:00:00Z",
    }
    open_ = _request(base | {"reconciling": True, "quotaConfig": {"preferredValue": "64"}}, "us-central1", "c")
    assert (open_.request_id, open_.status, open_.open, open_.desired_value) == ("gpufleet-x", "RECONCILING", True, 64)
    assert open_.updated_s is not None and open_.created_s is not None and open_.updated_s - open_.created_s == 86400
    assert open_.turnaround_s is None  # a preference is updated in place: its times tell no one request's turnaround
    granted = _request(base | {"quotaConfig": {"preferredValue": "64", "grantedValue": "64"}}, "us-central1", "c")
    assert (granted.status, granted.open) == ("GRANTED", False)
    short = _request(base | {"quotaConfig": {"preferredValue": "64", "grantedValue": "16"}}, "us-central1", "c")
    assert (short.status, short.open) == ("NOT_GRANTED", False)


def test_user_credentials_name_their_quota_project() -> None:
    """gcloud's user credentials carry the project Google bills an API's quota to; Cloud Quotas refuses user
    credentials without the ``x-goog-user-project`` header. A service account's carry none: no header."""
    from gpufleet.adapters.gcp.session import GcpConfig, GoogleApi

    class UserToken:
        quota_project_id = "fleet-billing"

        def __call__(self) -> str:
            return "ya29.user"

    cfg = GcpConfig(project="fleet-prod", endpoint_url="http://127.0.0.1:9/", credentials="none")
    assert GoogleApi(cfg, token=UserToken()).headers() == {
        "Authorization": "Bearer ya29.user",
        "x-goog-user-project": "fleet-billing",
    }
    assert GoogleApi(cfg, token=lambda: "ya29.sa").headers() == {"Authorization": "Bearer ya29.sa"}
