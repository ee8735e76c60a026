"""A declined increase: which request the outlook calls declined (AWS and GCP answers, the service's pick)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.adapters.aws.quotas import _request as aws_request
from gpufleet.adapters.gcp.quotas import _request as gcp_request
from gpufleet.adapters.quota_port import IncreaseRequest, QuotaReading, QuotaRef
from gpufleet.service.clock import FixedClock
from gpufleet.service.cloud_quotas import CloudQuotaService

CODE = "L-417A185B"


def _aws(status: str) -> IncreaseRequest:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return aws_request({"Id": "r", "QuotaCode": CODE, "DesiredValue": 192.0, "Status": status, "Created": at}, "x")


def test_aws_denied_and_not_approved_are_declined_and_nothing_else() -> None:
    declined = {s for s in ("PENDING", "CASE_OPENED", "APPROVED", "DENIED", "CASE_CLOSED", "NOT_APPROVED",
                             "INVALID_REQUEST") if _aws(s).declined}  # fmt: skip
    assert declined == {"DENIED", "NOT_APPROVED"}


def test_gcp_a_grant_below_the_preference_is_declined() -> None:
    def pref(granted: str | None, reconciling: bool = False) -> IncreaseRequest:
        config = {"preferredValue": "64"} | ({} if granted is None else {"grantedValue": granted})
        return gcp_request({"name": "p/x", "quotaConfig": config, "reconciling": reconciling}, "r", "c")

    assert pref("16").declined and pref("0").declined
    assert not pref("64").declined and not pref(None).declined and not pref("16", reconciling=True).declined


class Source:
    provider, unit, regions, files_increases = "aws", "vCPU", ("us-east-1",), True

    def __init__(self, history: list[IncreaseRequest]) -> None:
        self.history = history

    def quota_for(self, sku_id: str, tier: str) -> QuotaRef | None:
        return QuotaRef(CODE, "P on-demand", tier, "vCPU", 12, 8)

    def read(self, region: str) -> list[QuotaReading]:
        return [QuotaReading(region, CODE, "P on-demand", "P", "on_demand", 96.0)]

    def requests(self, region: str, code: str) -> list[IncreaseRequest]:
        return self.history


def _req(rid: str, status: str, *, open_: bool = False, declined: bool = False) -> IncreaseRequest:
    return IncreaseRequest(rid, "us-east-1", CODE, 384.0, status, open_, 0, 10, None, declined)


def _declined(history: list[IncreaseRequest]) -> str | None:
    service = CloudQuotaService(None, FixedClock(0), Source(history), cache_s=0)  # type: ignore[arg-type]
    pq = service.pool_quota("aws", "us-east-1", "h100", "on_demand")
    assert pq is not None
    return None if pq.declined_request is None else pq.declined_request.request_id


def test_only_the_last_decided_request_counts_as_declined() -> None:
    assert _declined([_req("a", "DENIED", declined=True)]) == "a"
    assert _declined([_req("a", "DENIED", declined=True), _req("b", "APPROVED")]) is None  # granted since
    assert _declined([_req("a", "APPROVED"), _req("b", "NOT_APPROVED", declined=True)]) == "b"
    assert _declined([_req("a", "DENIED", declined=True), _req("b", "PENDING", open_=True)]) == "a"  # open one decides
    assert _declined([]) is None
