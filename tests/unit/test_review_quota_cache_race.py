"""Review (fixed), the defect: CloudQuotaService drops a region's cached readings (and a quota's requests) when an
increase is filed or closes, but a read that was already in flight stores its older answer afterwards: the drop is
lost and the stale answer is served for ``cache_s`` (the outlook keeps the old quota, or shows no open request and
drafts the filed increase as due again)."""

from __future__ import annotations

import threading

from gpufleet.adapters.quota_port import IncreaseRequest, QuotaReading, QuotaRef
from gpufleet.service.auth import Actor, Role
from gpufleet.service.clock import FixedClock
from gpufleet.service.cloud_quotas import CloudQuotaService

CODE = "L-417A185B"


class SlowSource:
    """A provider whose first reading is slow: it was taken before the increase was granted."""

    provider, unit, regions, files_increases = "aws", "vCPU", ("us-east-1",), True

    def __init__(self) -> None:
        self.value = 96.0
        self.in_flight, self.release = threading.Event(), threading.Event()
        self.reads = 0

    def quota_for(self, sku_id: str, tier: str) -> QuotaRef | None:
        return QuotaRef(CODE, "P on-demand", tier, "vCPU", 12, 8)

    def read(self, region: str) -> list[QuotaReading]:
        self.reads += 1
        value = self.value
        if self.reads == 1:
            self.in_flight.set()
            self.release.wait(5)
        return [QuotaReading(region, CODE, "P on-demand", "P", "on_demand", value)]

    def requests(self, region: str, code: str) -> list[IncreaseRequest]:
        return []

    def request_increase(self, region: str, code: str, desired_value: float, *, reason: str) -> IncreaseRequest:
        raise NotImplementedError

    def request_status(self, region: str, request_id: str) -> IncreaseRequest:
        return IncreaseRequest(request_id, region, CODE, 192.0, "APPROVED", False, 0, 10)


def test_review_a_read_in_flight_does_not_undo_the_drop_of_a_closed_increase() -> None:
    source = SlowSource()
    service = CloudQuotaService(None, FixedClock(1_767_225_600), source, cache_s=300)  # type: ignore[arg-type]
    reader = threading.Thread(target=service.readings, args=("us-east-1",))
    reader.start()  # an outlook request reads the quota (96 vCPUs) ...
    assert source.in_flight.wait(5)
    source.value = 192.0  # ... meanwhile AWS approves the increase,
    got = service.increase_status(Actor("vic", Role.VIEWER, None), "us-east-1", "req-1")  # and it is seen closed
    assert got["open"] is False
    source.release.set()
    reader.join(5)
    assert service.readings("us-east-1")[CODE].value == 192.0  # before the fix: 96.0, stored after the drop, kept 300 s
