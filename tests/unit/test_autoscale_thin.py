"""Quiet request traces derived by seeded thinning (bench/autoscale_thin.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpufleet.bench.autoscale_thin import Thinning, thin_requests
from gpufleet.domain.errors import ValidationError


def _trace(tmp: Path, n: int = 4000) -> Path:
    p = tmp / "AzureLLMInferenceTrace_code.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:{i // 100 % 60:02d}:{i % 60:02d}.{i:06d},{100 + i % 7},{10 + i % 3}" for i in range(n)]
    p.write_text("\n".join(rows) + "\n")
    return p


def test_thinning_keeps_about_the_share_asked_in_order_under_a_named_file(tmp_path: Path) -> None:
    src = _trace(tmp_path)
    out = thin_requests(src, Thinning(0.25, seed=2), tmp_path)
    assert out.name == "AzureLLMInferenceTrace_code+keep25.csv"
    with src.open() as f:
        full = list(csv.reader(f))
    with out.open() as f:
        kept = list(csv.reader(f))
    assert kept[0] == full[0]
    assert 0.22 < (len(kept) - 1) / 4000 < 0.28
    index = {tuple(r): i for i, r in enumerate(full)}
    positions = [index[tuple(r)] for r in kept[1:]]
    assert positions == sorted(positions)  # a subsequence of the trace: arrival order kept
    (tmp_path / "again").mkdir()
    again = thin_requests(src, Thinning(0.25, seed=2), tmp_path / "again")
    assert again.read_text() == out.read_text()  # seeded


def test_a_share_outside_0_1_or_an_empty_trace_is_refused(tmp_path: Path) -> None:
    src = _trace(tmp_path)
    with pytest.raises(ValidationError, match="keep"):
        thin_requests(src, Thinning(0.0), tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(ValidationError, match="no request rows"):
        thin_requests(empty, Thinning(0.5), tmp_path)
