"""Every reader of a user's file either returns or raises ValidationError naming the file: whatever the bytes.

The fuzz mixes arbitrary bytes with near-valid CSV (right header, hostile cells: NaN, inf, huge and negative
numbers, times past year 9999, latin-1 bytes), which is where the readers used to raise ValueError,
OverflowError, UnicodeDecodeError or run out of memory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.adapters.cost_files import read_allocations_csv, read_capacity_csv
from gpufleet.adapters.inputs import read_input_text
from gpufleet.adapters.telemetry_files import parse_time, read_file
from gpufleet.adapters.traces import read_series_csv
from gpufleet.autoscale.throughput import ReplicaThroughputModel
from gpufleet.bench.autoscale_traces import load_traces
from gpufleet.bench.binpack import read_nodes, read_openb_nodes, read_openb_pods
from gpufleet.bench.forecast import load_regular
from gpufleet.bench.procure import load_demand
from gpufleet.bench.seeds import MAX_SEEDS, parse_seeds
from gpufleet.cli.scenario_files import load_scenario
from gpufleet.domain.errors import ValidationError

HOSTILE = ["", "0", "-1", "1.5", "nan", "NaN", "inf", "-inf", "1e400", "1e30", "99999999999999999999999", "abc",
           "1/7", "2024-01-01T00:00:00Z", "9999-12-31T23:00:00Z", "0001-01-01T00:00:00", "2024-13-45", "caf\xe9"]  # fmt: skip

HEADERS = {
    "series": "timestamp,series_id,value",
    "azure": "TIMESTAMP,ContextTokens,GeneratedTokens",
    "capacity": "id,pool_id,tier,sku_id,gpus,start,end,price_usd_per_gpu_h",
    "allocations": "id,workload_id,team_id,tenant_id,namespace,feature,pool_id,sku_id,gpus,start,end",
    "telemetry": "timestamp,metric,namespace,pod,device,value",
    "nodes": "sn,cpu_milli,memory_mib,gpu,model",
    "pai2020": "machine,gpu_type,cap_cpu,cap_mem,cap_gpu",
    "spot-nodes": "gpu_model,gpu_capacity_num,cpu_num,node_name",
    "pods": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time",
}

READERS: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "series": ("series", read_series_csv),
    "forecast": ("series", load_regular),
    "procure": ("series", load_demand),
    "procure-pods": ("pods", load_demand),
    "autoscale": ("series", lambda p: load_traces(p, model=ReplicaThroughputModel())),
    "autoscale-azure": ("azure", lambda p: load_traces(p, model=ReplicaThroughputModel())),
    "capacity": ("capacity", read_capacity_csv),
    "allocations": ("allocations", read_allocations_csv),
    "telemetry": ("telemetry", read_file),
    "nodes": ("nodes", read_openb_nodes),
    "nodes-any": ("nodes", read_nodes),
    "pai2020": ("pai2020", read_nodes),
    "spot-nodes": ("spot-nodes", read_nodes),
    "pods": ("pods", read_openb_pods),
}


def _near_valid(header: str) -> st.SearchStrategy[bytes]:
    width = header.count(",") + 1
    row = st.lists(st.sampled_from(HOSTILE), min_size=width, max_size=width).map(",".join)
    body = st.lists(row, min_size=0, max_size=4).map(lambda rows: "\n".join([header, *rows]) + "\n")
    return body.map(lambda text: text.encode("latin-1"))


def _assert_clean(read: Callable[[Path], Any], data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input.csv"
        path.write_bytes(data)
        try:
            read(path)
        except ValidationError as exc:
            assert str(path) in str(exc) or exc.location is None, exc  # when it says where, it names this file
            assert exc.field


@pytest.mark.parametrize("name", sorted(READERS))
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_a_reader_returns_or_names_the_problem_for_any_bytes(name: str, data: st.DataObject) -> None:
    kind, read = READERS[name]
    raw = data.draw(st.one_of(_near_valid(HEADERS[kind]), st.binary(max_size=200)), label="file")
    _assert_clean(read, raw)


def test_a_directory_a_missing_file_and_latin1_bytes_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="is a directory"):
        read_input_text(tmp_path)
    with pytest.raises(ValidationError, match="does not exist"):
        read_input_text(tmp_path / "nope.csv")
    bad = tmp_path / "latin1.csv"
    bad.write_bytes(b"timestamp,series_id,value\n2024-01-01T00:00:00Z,a,1\n2024-01-01T01:00:00Z,caf\xe9,2\n")
    with pytest.raises(ValidationError) as exc:
        read_series_csv(bad)
    assert exc.value.location == f"{bad}:3" and "UTF-8" in exc.value.message


def test_a_utf8_byte_order_mark_is_not_part_of_the_header(tmp_path: Path) -> None:
    f = tmp_path / "bom.csv"
    f.write_bytes(b"\xef\xbb\xbftimestamp,series_id,value\n2024-01-01T00:00:00Z,a,1\n2024-01-01T01:00:00Z,a,2\n")
    assert list(read_series_csv(f)["a"].values) == [1.0, 2.0]


def test_an_infinite_value_is_refused_with_its_line_and_an_empty_one_is_a_gap(tmp_path: Path) -> None:
    f = tmp_path / "s.csv"
    f.write_text("timestamp,series_id,value\n2024-01-01T00:00:00Z,a,\n2024-01-01T01:00:00Z,a,inf\n")
    with pytest.raises(ValidationError, match="finite") as exc:
        read_series_csv(f)
    assert exc.value.location == f"{f}:3"


def test_a_stray_timestamp_far_from_the_rest_is_refused_not_gridded(tmp_path: Path) -> None:
    f = tmp_path / "s.csv"
    rows = [f"2024-01-01T{h:02d}:00:00Z,a,1" for h in range(10)] + ["9999-01-01T00:00:00Z,a,1"]
    f.write_text("timestamp,series_id,value\n" + "\n".join(rows) + "\n")
    with pytest.raises(ValidationError, match="stray timestamp"):
        load_regular(f)


@given(text=st.text(max_size=30))
@settings(max_examples=300, deadline=None)
def test_times_parse_or_are_refused(text: str) -> None:
    try:
        t = parse_time(text, "here")
    except ValidationError as exc:
        assert exc.location == "here"
    else:
        assert 0 <= t <= 253_402_300_799 or "-" in text or "+" in text  # ISO times may precede 1970


@given(text=st.text(alphabet="0123456789-, ", max_size=12))
@settings(max_examples=300, deadline=None)
def test_seeds_parse_to_a_non_empty_bounded_list_or_are_refused(text: str) -> None:
    try:
        seeds = parse_seeds(text)
    except ValidationError as exc:
        assert exc.field == "--seeds"
    else:
        assert seeds and len(seeds) <= MAX_SEEDS and min(seeds) >= 0


def test_seed_ranges() -> None:
    assert parse_seeds("42-44") == [42, 43, 44]
    assert parse_seeds("3, 1") == [3, 1]
    for bad in ("5-1", "", ",", "-1", "1-", "a", f"0-{MAX_SEEDS}"):
        with pytest.raises(ValidationError, match="--seeds"):
            parse_seeds(bad)


def test_a_scenario_with_infinite_or_latin1_values_is_refused_with_its_line(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("name: x\npools:\n- sku: h100_80gb\n  region: us-east-1\n  on_demand_quota_gpus: 8\nseed: .inf\n")
    with pytest.raises(ValidationError) as exc:
        load_scenario(f)
    assert exc.value.field == "seed" and exc.value.location == f"{f}:6"
    f.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValidationError, match="UTF-8"):
        load_scenario(f)
