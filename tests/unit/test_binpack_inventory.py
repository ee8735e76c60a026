"""The node inventories of ../shared/data/inventory as bin-packing node lists (bench/binpack_inventory.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.bench.binpack import read_nodes, read_openb_pods, run_once
from gpufleet.bench.binpack_inventory import UNKNOWN_MEMORY_MIB
from gpufleet.domain.errors import ValidationError


def _write(tmp: Path, name: str, lines: list[str]) -> Path:
    p = tmp / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_pai2020_machines_become_gpu_nodes_in_milli_cpu_and_mib_and_cpu_only_ones_are_left_out(tmp_path: Path) -> None:
    p = _write(tmp_path, "pai.csv", [
        "machine,gpu_type,cap_cpu,cap_mem,cap_gpu",
        "m1,P100,64,512,2",
        "m2,CPU,96,512,0",
        "m3,V100M32,96,384,8",
    ])  # fmt: skip
    nodes = read_nodes(p)
    assert [(n.name, n.gpu_model, n.gpu_count, n.cpu_milli, n.memory_mib) for n in nodes] == [
        ("m1", "P100", 2, 64_000, 512 * 1024),
        ("m3", "V100M32", 8, 96_000, 384 * 1024),
    ]


def test_spot_nodes_have_no_memory_limit_and_keep_their_model(tmp_path: Path) -> None:
    p = _write(tmp_path, "spot.csv", ["gpu_model,gpu_capacity_num,cpu_num,node_name", "A10,1,128,0", "H800,8,192,1"])
    nodes = read_nodes(p)
    assert [(n.gpu_model, n.gpu_count, n.cpu_milli) for n in nodes] == [("A10", 1, 128_000), ("H800", 8, 192_000)]
    assert {n.memory_mib for n in nodes} == {UNKNOWN_MEMORY_MIB}
    assert len({n.name for n in nodes}) == 2


@pytest.mark.parametrize(
    ("lines", "field", "line"),
    [
        (["machine,gpu_type,cap_cpu,cap_mem,cap_gpu", "m1,P100,64,512,2", "m2,T4,96,512,1.5"], "cap_gpu", 3),
        (["machine,gpu_type,cap_cpu,cap_mem,cap_gpu", "m1,P100,-4,512,2"], "cap_cpu", 2),
        (["machine,gpu_type,cap_cpu,cap_mem,cap_gpu", "m1,P100,64,1e30,2"], "cap_mem", 2),
        (["gpu_model,gpu_capacity_num,cpu_num,node_name", "A10,1,128,0", "A10,900,128,1"], "gpu_capacity_num", 3),
        (["gpu_model,gpu_capacity_num,cpu_num,node_name", "A10,1,many,0"], "cpu_num", 2),
    ],
)
def test_a_bad_cell_is_named_by_column_file_and_line(tmp_path: Path, lines: list[str], field: str, line: int) -> None:
    p = _write(tmp_path, "inv.csv", lines)
    with pytest.raises(ValidationError) as exc:
        read_nodes(p)
    assert exc.value.field == field and exc.value.location == f"{p}:{line}"


def test_an_inventory_without_a_gpu_node_is_refused(tmp_path: Path) -> None:
    p = _write(tmp_path, "pai.csv", ["machine,gpu_type,cap_cpu,cap_mem,cap_gpu", "m2,CPU,96,512,0"])
    with pytest.raises(ValidationError, match="no node with a GPU"):
        read_nodes(p)


def test_a_pod_list_packs_onto_an_inventory_through_the_fgd_protocol(tmp_path: Path) -> None:
    nodes = read_nodes(_write(tmp_path, "spot.csv", [
        "gpu_model,gpu_capacity_num,cpu_num,node_name", *[f"A10,1,128,{i}" for i in range(6)], "H800,8,192,6",
    ]))  # fmt: skip
    pods = read_openb_pods(_write(tmp_path, "pods.csv", [
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec",
        *[f"p{i},4000,999999999,1,{250 * (1 + i % 4)}," for i in range(10)],
        "big,8000,16384,4,1000,",
    ]))  # fmt: skip
    for policy in ("gpufleet", "fgd"):
        r = run_once(nodes, pods, policy, 42, check=True)
        assert 0.0 <= r.unallocated_gpu_pct_at_100 < 100.0 and r.pods > len(pods)
