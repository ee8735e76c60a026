"""Service Quotas for the GPU instance families (the cloud quota port, ``adapters/quota_port.py``): read the
running-instance quotas per region, request an increase, follow its status. Values are vCPUs (what EC2's
running-instance quotas count), shared by every SKU of a family."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.aws.errors import call
from gpufleet.adapters.aws.reservations import epoch_s
from gpufleet.adapters.aws.session import AwsClients
from gpufleet.adapters.aws.skus import INSTANCE_TYPES, QUOTA_BY_CODE, QUOTA_CODES, instance_type, quota_code
from gpufleet.adapters.quota_port import IncreaseRequest, QuotaReading, QuotaRef

OPEN_STATUSES = frozenset({"PENDING", "CASE_OPENED"})
DECIDED_STATUSES = frozenset({"APPROVED", "CASE_CLOSED"})  # their created -> last update is the turnaround
DECLINED_STATUSES = frozenset({"DENIED", "NOT_APPROVED"})


class AwsServiceQuotas:
    provider = "aws"
    unit = "vCPU"
    files_increases = True

    def __init__(self, clients: AwsClients) -> None:
        self._clients = clients
        self.regions = clients.config.regions

    def _sq(self, region: str) -> Any:
        return self._clients.client("service-quotas", region)

    def quota_for(self, sku_id: str, tier: str) -> QuotaRef | None:
        if sku_id not in INSTANCE_TYPES or tier not in ("on_demand", "spot"):
            return None
        q, it = quota_code(sku_id, tier), instance_type(sku_id)
        return QuotaRef(q.code, q.name, tier, self.unit, it.vcpus_per_gpu, it.gpus)

    def read(self, region: str) -> list[QuotaReading]:
        """The four running-instance quotas (On-Demand and Spot, P and G families) of one region."""
        sq = self._sq(region)
        out = []
        for q in QUOTA_CODES:
            got = call("GetServiceQuota", sq.get_service_quota, ServiceCode="ec2", QuotaCode=q.code)
            quota = got.get("Quota", {})
            out.append(QuotaReading(region, q.code, q.name, q.family, q.tier, float(quota.get("Value", 0.0))))
        return out

    def request_increase(self, region: str, code: str, desired_value: float, *, reason: str) -> IncreaseRequest:
        if code not in QUOTA_BY_CODE:
            raise ValueError(f"unknown quota code {code!r}")
        sq = self._sq(region)
        got = call(
            "RequestServiceQuotaIncrease",
            sq.request_service_quota_increase,
            ServiceCode="ec2",
            QuotaCode=code,
            DesiredValue=desired_value,
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
    created = None if r.get("Created") is None else epoch_s(r["Created"])
    updated = None if r.get("LastUpdated") is None else epoch_s(r["LastUpdated"])
    status = str(r.get("Status", ""))
    decided = status in DECIDED_STATUSES
    turnaround = updated - created if decided and updated is not None and created is not None else None
    return IncreaseRequest(
        str(r.get("Id", "")),
        region,
        str(r.get("QuotaCode", "")),
        float(r.get("DesiredValue", 0.0)),
        status,
        status in OPEN_STATUSES,
        created,
        updated,
        turnaround,
        status in DECLINED_STATUSES,
    )
