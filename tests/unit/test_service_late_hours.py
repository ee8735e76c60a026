"""Hours not yet fully ingested at a planning pass (service/late_hours.py): which hours, and their fill."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.service.late_hours import HOUR_S, fill_late_hours, late_hours

TODAY = 1_767_225_600  # a midnight


def test_a_watermark_at_midnight_leaves_nothing_late() -> None:
    assert late_hours([TODAY, TODAY + 600], TODAY, 3) == 0  # a bucket running past midnight counts to midnight


def test_the_earliest_source_sets_the_late_hours() -> None:
    # one source delivered up to 23:00 (its 23:00 bucket has not arrived), another up to 22:40: 22:00 and 23:00
    assert late_hours([TODAY - HOUR_S, TODAY - 80 * 60], TODAY, 3) == 2
    assert late_hours([TODAY - 20 * 60], TODAY, 3) == 1  # 23:40: the last hour is partly in


def test_at_most_the_grace_and_nothing_without_sources_or_grace() -> None:
    assert late_hours([TODAY - 10 * HOUR_S], TODAY, 3) == 3  # silent for longer: read as stopped, not late
    assert late_hours([], TODAY, 3) == 0
    assert late_hours([TODAY - HOUR_S], TODAY, 0) == 0


def test_late_hours_take_the_same_hours_of_the_day_before() -> None:
    h = np.arange(48, dtype=np.float64)
    out = fill_late_hours(h, 2)
    np.testing.assert_array_equal(out[:46], h[:46])
    np.testing.assert_array_equal(out[46:], [22.0, 23.0])
    np.testing.assert_array_equal(h, np.arange(48))  # the input is not changed


def test_without_a_day_before_them_the_hours_stay() -> None:
    h = np.arange(25, dtype=np.float64)
    np.testing.assert_array_equal(fill_late_hours(h, 2), h)
    np.testing.assert_array_equal(fill_late_hours(h, 0), h)


@given(
    marks=st.lists(st.integers(TODAY - 3 * 86400, TODAY + 86400), max_size=6),
    grace=st.integers(0, 24),
)
def test_late_hours_are_bounded_by_the_grace_and_the_earliest_watermark(marks: list[int], grace: int) -> None:
    n = late_hours(marks, TODAY, grace)
    assert 0 <= n <= grace
    if marks and grace:
        first_late_h = TODAY // HOUR_S - n
        # every hour before the late ones is complete for every source, or beyond the grace
        assert n == grace or all(min(m, TODAY) >= first_late_h * HOUR_S for m in marks)
        # the first late hour is not complete for the earliest source
        assert n == 0 or min(min(m, TODAY) for m in marks) < (first_late_h + 1) * HOUR_S


@given(
    values=st.lists(st.floats(0, 1e4, allow_nan=False), min_size=0, max_size=80),
    n_late=st.integers(0, 30),
)
def test_fill_changes_only_the_late_hours(values: list[float], n_late: int) -> None:
    h = np.array(values, dtype=np.float64)
    out = fill_late_hours(h, n_late)
    assert out.shape == h.shape
    keep = len(h) - n_late if len(h) - n_late >= 24 and n_late > 0 else len(h)
    np.testing.assert_array_equal(out[:keep], h[:keep])
    for i in range(keep, len(h)):
        assert out[i] == h[i - 24]
