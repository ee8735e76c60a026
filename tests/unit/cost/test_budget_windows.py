"""Budget windows (UTC calendar day / ISO week / month) and commitments counted only from now on."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.cost.budgets import Commitment, budget_window, committed_units, expected_units
from gpufleet.domain.errors import ValidationError

TIMES = st.integers(min_value=0, max_value=4_102_444_800)  # 1970 .. 2100


@given(TIMES, st.sampled_from(["day", "week", "month"]))
def test_window_contains_now_and_starts_at_midnight(now_s: int, period: str) -> None:
    start, end = budget_window(period, now_s)
    assert start <= now_s < end
    s = datetime.fromtimestamp(start, UTC)
    assert (s.hour, s.minute, s.second) == (0, 0, 0)
    if period == "week":
        assert s.weekday() == 0 and end - start == 7 * 86_400
    if period == "month":
        assert s.day == 1 and datetime.fromtimestamp(end, UTC).day == 1 and 28 * 86_400 <= end - start <= 31 * 86_400
    assert budget_window(period, end) == (end, budget_window(period, end)[1])  # windows tile the time line


def test_window_examples_and_bad_period() -> None:
    dec_31 = int(datetime(2025, 12, 31, 23, 59, tzinfo=UTC).timestamp())
    assert budget_window("month", dec_31) == (
        int(datetime(2025, 12, 1, tzinfo=UTC).timestamp()),
        int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()),
    )
    assert budget_window("week", dec_31)[0] == int(datetime(2025, 12, 29, tzinfo=UTC).timestamp())  # a Monday
    with pytest.raises(ValidationError, match="period"):
        budget_window("year", dec_31)


def test_commitments_count_only_the_future_part_inside_the_window() -> None:
    window = (0, 100)
    c = [Commitment(10, 0, 50), Commitment(1, 80, 200), Commitment(5, -50, -1)]
    # at t=20: 30 s left of the first, 20 s of the second inside the window, the third is over
    assert committed_units(c, 20, window) == 10 * 30 + 1 * 20
    assert committed_units(c, 100, window) == 0
    assert expected_units(7, 90, 500, window) == 70


@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 1000), st.integers(0, 1000)), max_size=20),
    st.integers(0, 1000),
    st.integers(0, 1000),
)
def test_committed_never_grows_with_time(raw: list[tuple[int, int, int]], t1: int, dt: int) -> None:
    c = [Commitment(rate, a, a + d) for rate, a, d in raw]
    window = (0, 1000)
    assert 0 <= committed_units(c, t1 + dt, window) <= committed_units(c, t1, window)
