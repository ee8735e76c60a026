"""GPU bin-packing benchmark on the openb traces, following the FGD paper's protocol.

Protocol (FGD artifact, ``TunePodsByNodeTotalResource`` with ratio 1.3 and ``--shuffle-pod``):
pods sorted by name and shuffled with the seed; then pods drawn uniformly WITH replacement from the
trace are appended until the total GPU request would pass 1.3 x cluster GPU capacity; pods are placed
one at a time and never leave; a pod that fits nowhere fails and is skipped. The metric is
``100 - allocation %`` at the moment the arrived GPU request reaches 100 % of capacity. Pods are placed through
the control loop's scheduling stage (:class:`gpufleet.control.scheduling.FleetScheduler`, its node-table view).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufleet.adapters.inputs import read_input_text
from gpufleet.bench.binpack_inventory import (
    MAX_CORES,
    MAX_GIB,
    MAX_GPUS,
    check_row_width,
    read_pai2020_machines,
    read_spot_gpu_nodes,
)
from gpufleet.bench.binpack_mix import MixVariant, mix_pods
from gpufleet.bench.binpack_pins import PinVariant, pin_models
from gpufleet.control.scheduling import FleetScheduler, Placement
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.frag import fgd_typical_pods
from gpufleet.schedule.table import NodeSpec, NodeTable, PodRequest

TUNE_RATIO = 1.3
TIE_RANK = True


def _int(row: dict[str, str], key: str, where: str, most: float = math.inf) -> int:
    raw = (row.get(key) or "").strip()
    try:
        x = float(raw) if raw else 0.0
    except ValueError:
        raise ValidationError(key, f"not a number: {raw!r}", where) from None
    if not math.isfinite(x) or x < 0:
        raise ValidationError(key, f"must be a finite number >= 0, got {raw!r}", where)
    if x > most:  # far past any real node: the node table's integers would overflow
        raise ValidationError(key, f"must be at most {most:,.0f}, got {raw!r}", where)
    return int(x)


def read_openb_nodes(path: Path) -> list[NodeSpec]:
    """``sn, cpu_milli, memory_mib, gpu, model`` (openb node list)."""
    out: list[NodeSpec] = []
    with io.StringIO(read_input_text(path, "nodes"), newline="") as f:
        reader = csv.DictReader(f)
        need = {"sn", "cpu_milli", "memory_mib", "gpu", "model"}
        if not need <= set(reader.fieldnames or ()):
            raise ValidationError("header", f"need columns {sorted(need)}", str(path))
        for i, row in enumerate(reader, start=2):
            where = f"{path}:{i}"
            check_row_width(row, reader.fieldnames, where)
            out.append(
                NodeSpec(
                    name=row["sn"],
                    cpu_milli=_int(row, "cpu_milli", where, 1000 * MAX_CORES),
                    memory_mib=_int(row, "memory_mib", where, 1024 * MAX_GIB),
                    gpu_count=_int(row, "gpu", where, MAX_GPUS),
                    gpu_model=(row.get("model") or "").strip(),
                )
            )
    if not out:
        raise ValidationError("nodes", "no nodes", str(path))
    if not any(n.gpu_count > 0 for n in out):
        raise ValidationError("gpu", "no node has a GPU", str(path))
    return out


def read_nodes(path: Path) -> list[NodeSpec]:
    """A node list in any of the three layouts, told apart by the header: the openb node list
    (``sn, cpu_milli, ...``), the PAI 2020 machines or the spot GPU nodes (:mod:`gpufleet.bench.binpack_inventory`)."""
    with io.StringIO(read_input_text(path, "nodes"), newline="") as f:
        header = set(next(csv.reader(f), []))
    if {"machine", "cap_gpu"} <= header:
        return read_pai2020_machines(path)
    if {"gpu_capacity_num", "node_name"} <= header:
        return read_spot_gpu_nodes(path)
    return read_openb_nodes(path)


def read_openb_pods(path: Path) -> list[PodRequest]:
    """``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, ...`` (openb pod list), sorted by name."""
    out: list[PodRequest] = []
    with io.StringIO(read_input_text(path, "pods"), newline="") as f:
        reader = csv.DictReader(f)
        need = {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}
        if not need <= set(reader.fieldnames or ()):
            raise ValidationError("header", f"need columns {sorted(need)}", str(path))
        for i, row in enumerate(reader, start=2):
            where = f"{path}:{i}"
            check_row_width(row, reader.fieldnames, where)
            spec = tuple(sorted({s.strip() for s in (row.get("gpu_spec") or "").split("|")} - {""}))
            num = _int(row, "num_gpu", where)
            milli = _int(row, "gpu_milli", where) if num > 0 else 0
            pod = PodRequest(
                row["name"], _int(row, "cpu_milli", where), _int(row, "memory_mib", where), num, milli, spec
            )
            try:
                pod.validate()
            except ValidationError as exc:
                raise ValidationError(exc.field, exc.message, where) from None
            out.append(pod)
    if not out:
        raise ValidationError("pods", "no pods", str(path))
    if not any(p.total_gpu_milli > 0 for p in out):
        raise ValidationError("num_gpu", "no pod requests a GPU", str(path))
    out.sort(key=lambda p: p.name)
    return out


def arrivals(pods: Sequence[PodRequest], capacity_milli: int, rng: np.random.Generator) -> list[PodRequest]:
    """The FGD workload: shuffled trace, then uniform draws with replacement up to 1.3 x GPU capacity.

    Like the artifact, the stop test compares ``total + gpu_milli`` (per-GPU milli) with the target, and
    a trace already above the target is thinned by removing random pods."""
    order = rng.permutation(len(pods))
    seq = [pods[i] for i in order]
    total = sum(p.total_gpu_milli for p in seq)
    target = TUNE_RATIO * capacity_milli
    while total > target and seq:
        total -= seq.pop(int(rng.integers(len(seq)))).total_gpu_milli
    while True:
        extra = pods[int(rng.integers(len(pods)))]
        if total + extra.gpu_milli > target:
            break
        total += extra.total_gpu_milli
        seq.append(extra)
    return seq


@dataclass(frozen=True, slots=True)
class RunResult:
    policy: str
    seed: int
    unallocated_gpu_pct_at_100: float
    final_allocation_pct: float
    pods: int
    failed: int
    seconds: float


def run_once(
    nodes: Sequence[NodeSpec], pods: Sequence[PodRequest], policy: str, seed: int, *, check: bool = False
) -> RunResult:
    """One policy, one seed. The arrival order depends only on the seed (same for every policy)."""
    t0 = time.perf_counter()
    table = NodeTable.from_specs(nodes)
    rng = np.random.default_rng(seed)
    seq = arrivals(pods, table.gpu_capacity_milli, rng)
    target = fgd_typical_pods(pods) if policy == "fgd" else None
    rank = rng.permutation(table.n_nodes) if TIE_RANK else None
    sched = FleetScheduler.on_table(policy, table, rng, target=target, tie_rank=rank)  # the loop's scheduling stage
    cap = table.gpu_capacity_milli
    arrived = allocated = failed = 0
    at_100: float | None = None
    for req in seq:
        arrived += req.total_gpu_milli
        if isinstance(sched.place_request(req), Placement):
            allocated += req.total_gpu_milli
        else:
            failed += 1
        if at_100 is None and arrived >= cap:
            at_100 = 100.0 - 100.0 * allocated / cap
    if check:
        table.check_invariants()
        assert table.allocated_gpu_milli() == allocated
    return RunResult(
        policy=policy,
        seed=seed,
        unallocated_gpu_pct_at_100=at_100 if at_100 is not None else 100.0 - 100.0 * allocated / cap,
        final_allocation_pct=100.0 * allocated / cap,
        pods=len(seq),
        failed=failed,
        seconds=time.perf_counter() - t0,
    )


def summarize(results: Sequence[RunResult]) -> dict[str, dict[str, object]]:
    """Per policy: mean/sd of unallocated % at 100 % arrival and mean final allocation %."""
    out: dict[str, dict[str, object]] = {}
    for name in dict.fromkeys(r.policy for r in results):
        rs = [r for r in results if r.policy == name]
        u = [r.unallocated_gpu_pct_at_100 for r in rs]
        out[name] = {
            "unallocated_gpu_pct_at_100": {
                "mean": round(statistics.fmean(u), 3),
                "sd": round(statistics.stdev(u), 3) if len(u) > 1 else 0.0,
            },
            "final_allocation_pct": round(statistics.fmean(r.final_allocation_pct for r in rs), 3),
            "seeds": [r.seed for r in rs],
            "mean_seconds_per_run": round(statistics.fmean(r.seconds for r in rs), 2),
        }
    return out


def run_bench(
    nodes_path: Path,
    pods_path: Path,
    seeds: Sequence[int],
    policies: Sequence[str],
    progress: Callable[[RunResult], None] | None = None,
    pin: PinVariant | None = None,
    mix: MixVariant | None = None,
) -> dict[str, object]:
    """Every policy on every seed over the same arrival sequences; returns the JSON-ready summary.

    ``nodes_path`` is the openb node list or one of the inventories (:func:`read_nodes`).
    ``pin`` rewrites the pod list first (a share of GPU pods pinned to GPU models, see
    :mod:`gpufleet.bench.binpack_pins`) and ``mix`` changes its workload mix (more multi-GPU or CPU-only pods,
    :mod:`gpufleet.bench.binpack_mix`), in that order; the trace is then named after the variants."""
    nodes = read_nodes(nodes_path)
    pods = read_openb_pods(pods_path)
    if pin is not None:
        pods = pin_models(pods, nodes, pin)
    if mix is not None:
        pods = mix_pods(pods, mix)
    results: list[RunResult] = []
    for policy in policies:
        for seed in seeds:
            r = run_once(nodes, pods, policy, seed)
            results.append(r)
            if progress is not None:
                progress(r)
    trace = pods_path.stem + ("" if pin is None else pin.suffix) + ("" if mix is None else mix.suffix)
    return {"trace": trace, "seeds": list(seeds), "policies": summarize(results)}
