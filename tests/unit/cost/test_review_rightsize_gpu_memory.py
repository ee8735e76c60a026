"""Review: rightsizing when the replica's GPU memory was never measured (the stored usage carries utilization only:
``gpu_mem_gb`` is all NaN, so the p99 of GPU memory is NaN)."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.cost.rightsizing import ResourceSpec, UsageProfile, recommend
from gpufleet.domain.skus import SKUS_BY_ID

N = 2016  # a week of 5-minute samples
CANDIDATES = ("h100_80gb", "h200_141gb", "a100_80gb", "l40s")  # control/costing.py's SKU_CANDIDATES


def _util_only(util: float) -> UsageProfile:
    nan = np.full(N, np.nan)
    return UsageProfile(nan, nan, np.full(N, util), nan)


def _gpu_mem_gb(s: ResourceSpec) -> int:
    return s.gpus * SKUS_BY_ID[s.sku_id].memory_gb


@pytest.mark.parametrize(
    ("gpus", "util", "cands"),
    [(8, 0.10, CANDIDATES[1:]), (1, 0.05, CANDIDATES[1:]), (4, 0.02, CANDIDATES[1:]), (1, 0.05, ("l40s",))],
)
def test_unmeasured_gpu_memory_never_lowers_the_replicas_gpu_memory(
    gpus: int, util: float, cands: tuple[str, ...]
) -> None:
    """Review (fixed), the defect: ``recommend`` took a NaN p99 of GPU memory as ``need_mem = 0``, so only
    throughput bounded the GPUs: 8 x H100 (640 GB) at 10 % busy was cut to 1 H100 (80 GB), 1 H100 at 5 % moved to
    one L40S (48 GB) "fitting memory", and applied through the API that OOMs the model. Expected: unmeasured GPU
    memory keeps at least the replica's current GPU memory, says so (``gpu_memory_unmeasured_kept``) and never
    claims ``cheaper_sku_fits_memory_and_throughput``."""
    cur = ResourceSpec(cpu=64, mem_gb=512, gpus=gpus, sku_id="h100_80gb")
    rec = recommend("llm", cur, _util_only(util), candidate_skus=cands)
    assert _gpu_mem_gb(rec.recommended) >= _gpu_mem_gb(cur), (rec.recommended, rec.reasons)
    assert "cheaper_sku_fits_memory_and_throughput" not in rec.reasons  # no memory fit was checked
    assert "gpu_memory_unmeasured_kept" in rec.reasons, rec.reasons
    assert rec.evidence["gpu_mem_floor_gb"] == _gpu_mem_gb(cur)


def test_measured_gpu_memory_still_sizes_by_its_p99() -> None:
    """Review (holds): with GPU memory measured the memory-aware rule stands: 8 x H100 at 10 % holding 30 GB
    (36 GB with headroom) moves to fewer, cheaper GPUs and says the memory fits; no floor, no unmeasured reason."""
    cur = ResourceSpec(cpu=64, mem_gb=512, gpus=8, sku_id="h100_80gb")
    nan = np.full(N, np.nan)
    prof = UsageProfile(nan, nan, np.full(N, 0.10), np.full(N, 30.0))
    rec = recommend("llm", cur, prof, candidate_skus=CANDIDATES[1:])
    assert _gpu_mem_gb(rec.recommended) < _gpu_mem_gb(cur) and _gpu_mem_gb(rec.recommended) >= 36
    assert "cheaper_sku_fits_memory_and_throughput" in rec.reasons or "gpu_count_reduced" in rec.reasons
    assert "gpu_memory_unmeasured_kept" not in rec.reasons


def test_a_bucket_with_one_unmeasured_record_has_no_gpu_memory() -> None:
    """Review (fixed), the measured path: ``control.costing.rightsize`` takes a bucket's GPU memory (one replica's) as
    the largest of its records', and a bucket where one record holding GPUs was not measured as unmeasured: that
    pool's replicas may hold more, so a partly measured week keeps the current GPU memory."""
    from gpufleet.control.costing import rightsize
    from gpufleet.cost.books import UtilRec

    spec = ResourceSpec(cpu=64, mem_gb=512, gpus=8, sku_id="h100_80gb")
    starts = range(0, 336 * 1800, 1800)
    od, spot = "aws/us-east-1/h100_80gb/on_demand", "nebius/eu-north1/h100_80gb/spot"
    measured = [UtilRec("w", "t", "h100_80gb", t, 1800, 4.0, 0.1, p, g) for t in starts for p, g in ((od, 20.0),
                (spot, 30.0))]  # fmt: skip
    rec = rightsize("w", spec, measured)
    assert rec is not None and rec.evidence["gpu_mem_p_gb"] == 30.0 and "gpu_memory_unmeasured_kept" not in rec.reasons
    partly = [UtilRec("w", "t", "h100_80gb", t, 1800, 4.0, 0.1, p, g) for t in starts for p, g in ((od, 20.0),
              (spot, float("nan")))]  # fmt: skip
    rec = rightsize("w", spec, partly)
    assert rec is not None and "gpu_memory_unmeasured_kept" in rec.reasons
    assert _gpu_mem_gb(rec.recommended) >= 640


def test_csv_ingest_reads_and_checks_gpu_memory() -> None:
    """Review (holds): the CSV upload takes the optional ``gpu_mem_gb`` column (empty: not measured) and refuses a
    negative one naming the field; a CSV without the column still parses (older clients)."""
    from gpufleet.domain.errors import ValidationError
    from gpufleet.service.ingest import parse_csv, validate

    head = "source,bucket_start_s,bucket_s,workload_id,team_id,sku_id,gpus_allocated,gpu_util"
    rows = parse_csv(f"{head},gpu_mem_gb\ns,0,3600,w,t,h100_80gb,8,0.1,120.5\ns,3600,3600,w,t,h100_80gb,8,0.1,\n")
    assert [r["gpu_mem_gb"] for r in rows] == [120.5, None]
    validate(rows)
    assert parse_csv(f"{head}\ns,0,3600,w,t,h100_80gb,8,0.1\n")[0]["gpu_mem_gb"] is None
    with pytest.raises(ValidationError) as err:
        validate(parse_csv(f"{head},gpu_mem_gb\ns,0,3600,w,t,h100_80gb,8,0.1,-1\n"))
    assert err.value.field == "records[0].gpu_mem_gb"
