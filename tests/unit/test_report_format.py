"""Numbers for people: the report's formatting helpers, checked on many values (Hypothesis)."""

from __future__ import annotations

import math
import re

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.report.fmt import attainment, count, duration, pct, ratio, short, sku_label, usd
from gpufleet.report.svg import axis_num, day_ticks, nice_ticks

finite = st.floats(min_value=-1e14, max_value=1e14, allow_nan=False, allow_infinity=False)
USD = re.compile(r"^-?\$(\d+(\.\d+)?[kMBT]?|\d{1,3}(,\d{3})*T)$")
SUFFIX = {"": 1.0, "k": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def parse_usd(text: str) -> float:
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("-").lstrip("$").replace(",", "")
    mult = SUFFIX.get(body[-1], 1.0)
    return sign * float(body.rstrip("kMBT")) * mult


@given(finite)
def test_usd_is_short_readable_and_close_to_the_value(x: float) -> None:
    text = usd(x)
    assert USD.match(text), text
    assert "e" not in text.lower() and "nan" not in text
    back = parse_usd(text)
    # three significant digits above $10; cents below
    assert math.isclose(back, x, rel_tol=0.0051, abs_tol=0.0051), (x, text)


def test_usd_examples_people_read() -> None:
    assert usd(4_408_000) == "$4.41M"
    assert usd(999_999) == "$1.00M"  # not $1000k
    assert usd(312_400) == "$312k"
    assert usd(880) == "$880"
    assert usd(0) == "$0"
    assert usd(-1234) == "-$1.23k"
    assert usd(float("nan")) == usd(float("inf")) == usd(None) == "n/a"


@given(st.floats(min_value=0, max_value=1, allow_nan=False))
def test_a_percentage_reads_back_within_its_last_digit(x: float) -> None:
    text = pct(x)
    assert re.match(r"^\d{1,3}\.\d%$", text), text
    assert abs(float(text[:-1]) - x * 100) <= 0.05 + 1e-9


@given(st.floats(min_value=0, max_value=1, allow_nan=False))
def test_attainment_below_one_never_reads_as_100_percent(x: float) -> None:
    text = attainment(x)
    value = float(text[:-1])
    if x < 1.0:
        assert value < 100.0, (x, text)
    else:
        assert text == "100.0%"
    assert abs(value - x * 100) <= 0.05 + 1e-9


@given(st.floats(min_value=0, max_value=400 * 86400, allow_nan=False))
def test_durations_pick_a_unit_and_read_back_close(seconds: float) -> None:
    text = duration(seconds)
    m = re.match(r"^(\d+(\.\d)?) (s|min|h|d)$", text)
    assert m, text
    unit = {"s": 1, "min": 60, "h": 3600, "d": 86400}[m.group(3)]
    back = float(m.group(1)) * unit
    assert abs(back - seconds) <= 0.05 * unit + 0.5, (seconds, text)  # within half of the last digit shown
    assert m.group(3) == "s" or float(m.group(1)) >= 1.0  # the largest unit that is at least 1


def test_duration_examples() -> None:
    assert duration(0) == "0 s"
    assert duration(3.2 * 3600) == "3.2 h"
    assert duration(750) == "12.5 min"
    assert duration(3 * 86400) == "3.0 d"


@given(finite)
def test_short_numbers_have_no_exponent_and_three_digits(x: float) -> None:
    text = short(x)
    assert "e" not in text.lower()
    digits = re.sub(r"[^\d]", "", text)
    if abs(x) >= 999.5 and abs(x) < 999.5e12:
        assert len(digits) == 3, text


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_ratios_and_counts(x: float) -> None:
    assert re.match(r"^-?\d+\.\d{3}x$", ratio(x))
    assert re.match(r"^-?\d{1,3}(,\d{3})*$", count(x))


@given(st.floats(min_value=1e-3, max_value=1e12))
def test_nice_ticks_cover_zero_to_the_top_in_round_steps(top: float) -> None:
    ticks = nice_ticks(0.0, top, 6)
    assert ticks[0] == 0 and ticks[-1] >= top * (1 - 1e-9)
    assert 2 <= len(ticks) <= 8
    step = ticks[1] - ticks[0]
    mant = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mant, m, rel_tol=1e-6) for m in (1, 2, 2.5, 5, 10))
    assert all("e" not in axis_num(t).lower() for t in ticks)


@given(st.integers(min_value=1, max_value=3650))
def test_day_ticks_start_at_zero_stay_in_the_run_and_are_few(days: int) -> None:
    ticks = day_ticks(days)
    assert ticks[0] == 0 and ticks[-1] <= days and len(ticks) <= 13


def test_sku_labels_are_model_names() -> None:
    assert sku_label("h100_80gb") == "H100"
    assert sku_label("l40s") == "L40S"
    assert sku_label("custom_x") == "custom_x"
