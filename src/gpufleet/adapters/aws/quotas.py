"""Service Quotas for the GPU instance families: read the running-instance quotas per region, request an
increase, follow its status. Values are vCPUs (what EC2's running-instance quotas count)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpufleet.adapters.aws.errors import call
from gpufleet.adapters.aws.reservations import epoch_s
from gpufleet.adapters.aws.session import AwsClients
from gpufleet.adapters.aws.skus import QUOTA_BY_CODE, QUOTA_CODES

OPEN_STATUSES = frozenset({"PENDING", "CASE_OPENED"})


@dataclass(frozen=True, slots=True)
class QuotaReading:
    region: str
    code: str
    name: str
    family: str
    tier: str
    value_vcpus: float


@dataclass(frozen=True, slots=True)
class IncreaseRequest:
    request_id: str
    region: str
    code: str
    desired_vcpus: float
    status: str
    created_s: int | None
    updated_s: int | None

    @property
    def open(self) -> bool:
        return self.status in OPEN_STATUSES


class AwsServiceQuotas:
    def __init__(self, clients: AwsClients) -> None:
        self._clients = clients

    def _sq(self, region: str) -> Any:
        return self._clients.client("service-quotas", region)

    def read(self, region: str) -> list[QuotaReading]:
        """The four running-instance quotas (On-Demand and Spot, P and G families) of one region."""
        sq = self._sq(region)
        out = []
        for q in QUOTA_CODES:
            got = call("GetServiceQuota", sq.get_service_quota, ServiceCode="ec2", QuotaCode=q.code)
            quota = got.get("Quota", {})
            out.append(QuotaReading(region, q.code, q.name, q.family, q.tier, float(quota.get("Value", 0.0))))
        return out

    def request_increase(self, region: str, code: str, desired_vcpus: float) -> IncreaseRequest:
        if code not in QUOTA_BY_CODE:
            raise ValueError(f"unknown quota code {code!r}")
        sq = self._sq(region)
        got = call(
            "RequestServiceQuotaIncrease",
            sq.request_service_quota_increase,
            ServiceCode="ec2",
            QuotaCode=code,
            DesiredValue=desired_vcpus,
        )
        return _request(got.get("RequestedQuota", {}), region)

    def request_status(self, region: str, request_id: str) -> IncreaseRequest:
        sq = self._sq(region)
        got = call("GetRequestedServiceQuotaChange", sq.get_requested_service_quota_change, RequestId=request_id)
        return _request(got.get("RequestedQuota", {}), region)

    def requests(self, region: str, code: str) -> list[IncreaseRequest]:
        """Every increase request of one quota (open and closed), oldest first."""
        sq = self._sq(region)
        out: list[IncreaseRequest] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"ServiceCode": "ec2", "QuotaCode": code}
            if token:
                kwargs["NextToken"] = token
            page = call(
                "ListRequestedServiceQuotaChangeHistoryByQuota",
                sq.list_requested_service_quota_change_history_by_quota,
                **kwargs,
            )
            out.extend(_request(r, region) for r in page.get("RequestedQuotas", []))
            token = page.get("NextToken")
            if not token:
                return sorted(out, key=lambda r: (r.created_s or 0, r.request_id))


def _request(r: dict[str, Any], region: str) -> IncreaseRequest:
    created = r.get("Created")
    updated = r.get("LastUpdated")
    return IncreaseRequest(
        str(r.get("Id", "")),
        region,
        str(r.get("QuotaCode", "")),
        float(r.get("DesiredValue", 0.0)),
        str(r.get("Status", "")),
        None if created is None else epoch_s(created),
        None if updated is None else epoch_s(updated),
    )
