"""Per-request CSVs with a measured service time: columns, filters, groups and errors that say where."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.bench.autoscale_requests import RequestColumns, load_request_csv, parse_where
from gpufleet.domain.errors import ValidationError

HEADER = "gmt_create,predict_status,exec_time_seconds,model_id"
ROWS = [
    "2024-11-15 10:00:10,SUCCEED,30.0,M1",
    "2024-11-15 10:00:00,SUCCEED,20.0,M2",  # out of order on purpose
    "2024-11-15 10:01:00,FAILED,5.0,M1",
    "2024-11-15 10:02:00,SUCCEED,40.5,M1",
    "2024-11-15 10:03:00,SUCCEED,10.0,M3",
    "2024-11-15 10:03:30,SUCCEED,12.0,M2",
]
COLS = RequestColumns(time_column="gmt_create", work_column="exec_time_seconds")


def _write(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    p = tmp_path / "req.csv"
    p.write_text("\n".join([header, *rows]) + "\n")
    return p


def test_rows_become_arrivals_with_their_measured_work(tmp_path: Path) -> None:
    (tr,) = load_request_csv(_write(tmp_path, ROWS), COLS, step_s=1.0)
    assert tr.trace_id == "req.csv"
    assert tr.req_t_s is not None and tr.req_work_s is not None
    assert tr.req_t_s.tolist() == [0.0, 10.0, 60.0, 120.0, 180.0, 210.0]  # sorted, from the first arrival
    assert tr.req_work_s.tolist() == [20.0, 30.0, 5.0, 40.5, 10.0, 12.0]
    assert tr.count.sum() == 6 and tr.work_s.sum() == pytest.approx(117.5)
    assert tr.work_s[10] == 30.0 and tr.count[60] == 1
    assert tr.mean_work_s == pytest.approx(117.5 / 6)


def test_where_keeps_matching_rows_and_names_the_filter(tmp_path: Path) -> None:
    cols = RequestColumns("gmt_create", "exec_time_seconds", where=parse_where(["predict_status=SUCCEED"]))
    (tr,) = load_request_csv(_write(tmp_path, ROWS), cols)
    assert tr.trace_id == "req.csv[predict_status=SUCCEED]"
    assert tr.req_work_s is not None and 5.0 not in tr.req_work_s.tolist()
    assert tr.count.sum() == 5


def test_top_groups_are_the_busiest_with_ties_broken_by_name(tmp_path: Path) -> None:
    cols = RequestColumns("gmt_create", "exec_time_seconds", group_column="model_id", top_groups=2)
    traces = load_request_csv(_write(tmp_path, ROWS), cols)
    assert [t.trace_id for t in traces] == ["req.csv:model_id=M1", "req.csv:model_id=M2"]
    m1 = traces[0]
    assert m1.req_t_s is not None and m1.req_t_s.tolist() == [0.0, 50.0, 110.0]  # from the group's first request
    named = load_request_csv(
        _write(tmp_path, ROWS),
        RequestColumns("gmt_create", "exec_time_seconds", group_column="model_id", groups=("M3",)),
    )
    assert [t.count.sum() for t in named] == [1]


def test_column_names_match_case_insensitively(tmp_path: Path) -> None:
    (tr,) = load_request_csv(_write(tmp_path, ROWS), RequestColumns("GMT_CREATE", "Exec_Time_Seconds"))
    assert tr.count.sum() == 6


@pytest.mark.parametrize(
    ("cols", "needle"),
    [
        (RequestColumns("created", "exec_time_seconds"), "no column 'created'"),
        (RequestColumns("gmt_create", "secs"), "no column 'secs'"),
        (RequestColumns("gmt_create", "exec_time_seconds", where=(("status", "OK"),)), "no column 'status'"),
        (RequestColumns("gmt_create", "exec_time_seconds", where=(("predict_status", "OK"),)), "predict_status='OK'"),
        (
            RequestColumns("gmt_create", "exec_time_seconds", group_column="model_id", groups=("M9",)),
            "model_id='M9'",
        ),
    ],
)
def test_bad_columns_and_values_name_them(tmp_path: Path, cols: RequestColumns, needle: str) -> None:
    with pytest.raises(ValidationError) as exc:
        load_request_csv(_write(tmp_path, ROWS), cols)
    assert needle in str(exc.value)


@pytest.mark.parametrize(
    ("bad_row", "field"),
    [
        ("yesterday-ish,SUCCEED,3.0,M1", "gmt_create"),
        ("2024-11-15 10:05:00,SUCCEED,-1,M1", "exec_time_seconds"),
        ("2024-11-15 10:05:00,SUCCEED,,M1", "exec_time_seconds"),
        ("2024-11-15 10:05:00,SUCCEED,abc,M1", "exec_time_seconds"),
    ],
)
def test_bad_values_name_the_column_and_the_line(tmp_path: Path, bad_row: str, field: str) -> None:
    rows = [*ROWS[:3], bad_row, *ROWS[3:]]  # the bad row is line 5 (header = line 1)
    with pytest.raises(ValidationError) as exc:
        load_request_csv(_write(tmp_path, rows), COLS)
    assert exc.value.field == field
    assert exc.value.location is not None and exc.value.location.endswith("req.csv:5")


def test_all_zero_work_and_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="no work"):
        load_request_csv(_write(tmp_path, ["2024-11-15 10:00:00,PENDING,0,M1"]), COLS)
    with pytest.raises(ValidationError, match="group column"):
        RequestColumns("t", "w", top_groups=2)
    with pytest.raises(ValidationError, match="name the groups"):
        RequestColumns("t", "w", group_column="g")
    with pytest.raises(ValidationError, match="COLUMN=VALUE"):
        parse_where(["predict_status"])
    assert parse_where(["a = b=c"]) == (("a", "b=c"),)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 86_400 * 3), st.floats(0.0, 600.0, allow_nan=False).map(lambda x: round(x, 3))),
        min_size=1,
        max_size=40,
    ).filter(lambda rows: any(w > 0 for _, w in rows))
)
def test_binning_keeps_every_request_and_all_its_work(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, float]]
) -> None:
    base = np.datetime64("2024-11-15T00:00:00")
    lines = [f"{base + np.timedelta64(t, 's')},SUCCEED,{w},M1" for t, w in rows]
    p = _write(tmp_path_factory.mktemp("h"), lines)
    (tr,) = load_request_csv(p, COLS, step_s=0.5)
    assert tr.count.sum() == len(rows)
    assert tr.work_s.sum() == pytest.approx(sum(w for _, w in rows))
    assert tr.req_t_s is not None and np.all(np.diff(tr.req_t_s) >= 0) and tr.req_t_s[0] == 0.0
    span = max(t for t, _ in rows) - min(t for t, _ in rows)
    assert tr.req_t_s[-1] == pytest.approx(span)


def test_blank_lines_are_skipped_and_later_lines_keep_their_numbers(tmp_path: Path) -> None:
    rows = [ROWS[0], "", ROWS[1], "2024-11-15 10:05:00,SUCCEED,oops,M1"]  # the bad row is line 5
    with pytest.raises(ValidationError) as exc:
        load_request_csv(_write(tmp_path, rows), COLS)
    assert exc.value.location is not None and exc.value.location.endswith("req.csv:5")
    (tr,) = load_request_csv(_write(tmp_path, [ROWS[0], "", ROWS[1], ""]), COLS)
    assert tr.count.sum() == 2


def test_empty_or_ragged_files_are_validation_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValidationError, match="empty"):
        load_request_csv(empty, COLS)
    with pytest.raises(ValidationError, match="no request rows"):
        load_request_csv(_write(tmp_path, []), COLS)
    with pytest.raises(ValidationError, match="not a readable CSV"):
        load_request_csv(_write(tmp_path, [ROWS[0], "2024-11-15 10:01:00,SUCCEED,3,M1,extra,fields"]), COLS)
