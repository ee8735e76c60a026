"""Other real clusters to pack the openb pod lists onto: the node inventories of ``../shared/data/inventory``.

The FGD protocol packs a pod list onto the cluster it came from (the openb GPU node list). The two public
inventories are other Alibaba clusters with another mix of node shapes; packing the same pods onto them asks
whether a packer's advantage holds on a fleet it was not designed on (issue 21):

- ``alibaba_pai2020_machines.csv`` (``machine, gpu_type, cap_cpu, cap_mem, cap_gpu``; CPUs in cores, memory in
  GiB): PAI 2020, 2-GPU P100 and T4 nodes beside 8-GPU V100 and ``MISC`` nodes. Machines without a GPU are
  left out, as the openb node list holds GPU nodes only.
- ``alibaba_spot_gpu_nodes.csv`` (``gpu_model, gpu_capacity_num, cpu_num, node_name``): mostly single-GPU A10
  nodes beside 8-GPU A100 / A800 / H800 nodes. The file has no memory column: memory is not a constraint
  there (every node gets :data:`UNKNOWN_MEMORY_MIB`). FGD's fragmentation measure does not read memory
  either (:func:`gpufleet.schedule.frag.fgd_typical_pods`).

Both read into :class:`~gpufleet.schedule.table.NodeSpec` lists like ``read_openb_nodes``; a bad cell is an
error naming file, line and column. :func:`gpufleet.bench.binpack.read_nodes` reads any of the three layouts.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from gpufleet.adapters.inputs import read_input_text
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import NodeSpec

PAI2020 = "inventory/alibaba_pai2020_machines.csv"
SPOT_NODES = "inventory/alibaba_spot_gpu_nodes.csv"
#: Memory of a node whose inventory does not say (1 PiB in MiB): never the binding resource.
UNKNOWN_MEMORY_MIB = 1 << 30


#: Upper bounds of a node's cells: GPUs per node, CPU cores, memory GiB (far above any real node).
MAX_GPUS, MAX_CORES, MAX_GIB = 64, 1 << 16, 1 << 20


def _number(row: dict[str, str], key: str, where: str, most: int, whole: bool = False) -> float:
    raw = (row.get(key) or "").strip()
    try:
        x = float(raw)
    except ValueError:
        raise ValidationError(key, f"not a number: {raw!r}", where) from None
    if not math.isfinite(x) or not 0 <= x <= most:
        raise ValidationError(key, f"must be a number in 0-{most}, got {raw!r}", where)
    if whole and x != int(x):
        raise ValidationError(key, f"must be a whole number, got {raw!r}", where)
    return x


def check_row_width(row: dict[str, str], fieldnames: Sequence[str] | None, where: str) -> None:
    """Refuse a row with fewer fields than the header (a file cut short): ``csv.DictReader`` fills the missing
    cells with None, which the readers would otherwise take as empty cells (0)."""
    if None in row.values():
        got = sum(v is not None for k, v in row.items() if k is not None)
        raise ValidationError("row", f"expected {len(fieldnames or ())} fields, got {got}", where)


def _read(path: Path, need: set[str], node: Callable[[dict[str, str], str], NodeSpec | None]) -> list[NodeSpec]:
    out: list[NodeSpec] = []
    with io.StringIO(read_input_text(path, "nodes"), newline="") as f:
        reader = csv.DictReader(f)
        if not need <= set(reader.fieldnames or ()):
            raise ValidationError("header", f"need columns {sorted(need)}", str(path))
        for i, row in enumerate(reader, start=2):
            check_row_width(row, reader.fieldnames, f"{path}:{i}")
            spec = node(row, f"{path}:{i}")
            if spec is not None:
                out.append(spec)
    if not out:
        raise ValidationError("nodes", "no node with a GPU", str(path))
    return out


def read_pai2020_machines(path: Path) -> list[NodeSpec]:
    """GPU machines of the PAI 2020 inventory (CPU-only machines are skipped)."""

    def node(row: dict[str, str], where: str) -> NodeSpec | None:
        gpus = _number(row, "cap_gpu", where, MAX_GPUS, whole=True)
        if gpus == 0:
            return None
        return NodeSpec(
            name=(row.get("machine") or "").strip() or where,
            cpu_milli=round(1000 * _number(row, "cap_cpu", where, MAX_CORES)),
            memory_mib=round(1024 * _number(row, "cap_mem", where, MAX_GIB)),
            gpu_count=int(gpus),
            gpu_model=(row.get("gpu_type") or "").strip(),
        )

    return _read(path, {"machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"}, node)


def read_spot_gpu_nodes(path: Path) -> list[NodeSpec]:
    """The spot GPU node inventory; memory unknown (:data:`UNKNOWN_MEMORY_MIB`)."""

    def node(row: dict[str, str], where: str) -> NodeSpec | None:
        gpus = _number(row, "gpu_capacity_num", where, MAX_GPUS, whole=True)
        if gpus == 0:
            return None
        return NodeSpec(
            name=f"spot-{(row.get('node_name') or '').strip() or where}",
            cpu_milli=round(1000 * _number(row, "cpu_num", where, MAX_CORES)),
            memory_mib=UNKNOWN_MEMORY_MIB,
            gpu_count=int(gpus),
            gpu_model=(row.get("gpu_model") or "").strip(),
        )

    return _read(path, {"gpu_model", "gpu_capacity_num", "cpu_num", "node_name"}, node)


#: name -> path under the data directory: the inventories the bin-packing stage packs onto.
INVENTORIES = {"pai2020": PAI2020, "spot": SPOT_NODES}
