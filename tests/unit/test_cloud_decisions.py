"""The pure decisions the cloud adapters feed: the next link after a refused launch, and when and how much
quota increase to draft."""

from __future__ import annotations

from decimal import Decimal

from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.place.launch import next_link
from gpufleet.ports import PlacementRequest, PoolState
from gpufleet.procure.quota import QuotaOutlook
from gpufleet.procure.quota_increase import draft_increase, usual_turnaround_s

DAY = 86400


def _state(pid: str, tier: Tier) -> PoolState:
    return PoolState(CapacityPool(pid, "aws", "us-east-1", "h100_80gb", tier, Decimal(1)), 0, None, True)


def test_a_refused_pool_becomes_a_skipped_link_with_the_launch_reason() -> None:
    pools = [_state("od", Tier.ON_DEMAND), _state("spot", Tier.SPOT), _state("res", Tier.RESERVED)]
    train = PlacementRequest("w", "h100_80gb", 8, serving=False, checkpointable=True)
    assert next_link(train, pools, {}).pool_id == "od"
    after = next_link(train, pools, {"od": "insufficient_capacity"})
    assert after.pool_id == "spot" and after.reason == "placed_spot"
    assert [(s.pool_id, s.trigger) for s in after.fallback] == [
        ("res", "reserved_not_launchable"),
        ("od", "insufficient_capacity"),
    ]
    both = next_link(train, pools, {"od": "insufficient_capacity", "spot": "insufficient_capacity"})
    assert both.pool_id is None and [s.trigger for s in both.fallback][-3:] == [
        "insufficient_capacity",
        "insufficient_capacity",
        "queue",
    ]


def _outlook(exhausts_at_s: int | None, peak: float = 30.0, quota: float | None = 16.0) -> QuotaOutlook:
    return QuotaOutlook("p", quota, peak, 2.0, exhausts_at_s, None, "x")


def test_an_increase_is_drafted_before_exhaustion_minus_the_turnaround() -> None:
    now = 1000 * DAY
    ex = now + 30 * DAY
    later = draft_increase(_outlook(ex), now_s=now, turnaround_s=14 * DAY, gpus_per_instance=8)
    assert (later.due, later.reason, later.file_by_s) == (False, "later", ex - 14 * DAY)
    assert later.desired_gpus == 40  # 30 * 1.1 = 33 -> whole 8-GPU instances
    not_yet = draft_increase(_outlook(ex), now_s=now, turnaround_s=20 * DAY, gpus_per_instance=8)
    assert not not_yet.due  # file by in 10 days: outside the 7-day warning
    due = draft_increase(_outlook(ex), now_s=now, turnaround_s=25 * DAY, gpus_per_instance=8)
    assert (due.due, due.reason, due.file_by_s) == (True, "draft", now + 5 * DAY)  # file by in 5 days
    late = draft_increase(_outlook(ex), now_s=now, turnaround_s=40 * DAY, gpus_per_instance=8)
    assert (late.due, late.reason) == (True, "late")
    covered = draft_increase(_outlook(ex), now_s=now, turnaround_s=40 * DAY, gpus_per_instance=8, open_request_gpus=40)
    assert (covered.due, covered.reason) == (False, "request_open")
    short = draft_increase(_outlook(ex), now_s=now, turnaround_s=40 * DAY, gpus_per_instance=8, open_request_gpus=24)
    assert short.due
    assert draft_increase(_outlook(None), now_s=now, turnaround_s=0, gpus_per_instance=8).reason == "not_exhausted"


def test_a_declined_request_for_as_much_is_not_filed_again_by_itself() -> None:
    now = 1000 * DAY
    ex = now + 30 * DAY
    kw = {"now_s": now, "turnaround_s": 40 * DAY, "gpus_per_instance": 8}
    declined = draft_increase(_outlook(ex), **kw, declined_request_gpus=40)
    assert (declined.due, declined.reason, declined.desired_gpus) == (False, "declined", 40)
    bigger_need = draft_increase(_outlook(ex), **kw, declined_request_gpus=24)  # asked less than is needed now
    assert (bigger_need.due, bigger_need.reason) == (True, "late")
    reopened = draft_increase(_outlook(ex), **kw, open_request_gpus=24, declined_request_gpus=40)
    assert (reopened.due, reopened.reason) == (True, "late")  # a person asked again (open), for too little


def test_usual_turnaround_is_the_median_of_closed_requests() -> None:
    assert usual_turnaround_s([], 14 * DAY) == 14 * DAY
    assert usual_turnaround_s([3 * DAY, 1 * DAY, 9 * DAY], 0) == 3 * DAY
    assert usual_turnaround_s([2 * DAY, 4 * DAY], 0) == 3 * DAY
