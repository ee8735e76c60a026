"""Group commit: every request gets its own result (or exception), batches form under concurrency, one batch
per key at a time, and a failing batch fails only its own requests."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpufleet.service.group_commit import GroupCommit


def test_results_match_requests_and_batches_form_one_key_at_a_time() -> None:
    sizes: list[int] = []
    running: dict[str, int] = {}
    overlap: list[str] = []
    guard = threading.Lock()

    def run(key: str, items: Sequence[int]) -> list[int | BaseException]:
        with guard:
            running[key] = running.get(key, 0) + 1
            if running[key] > 1:
                overlap.append(key)
        time.sleep(0.005)  # a transaction's worth of time, so requests pile up behind it
        with guard:
            running[key] -= 1
            sizes.append(len(items))
        return [ValueError(f"odd {i}") if i % 7 == 0 else i * 10 for i in items]

    gc: GroupCommit[int, int] = GroupCommit(run, max_batch=5)

    def ask(i: int) -> int | str:
        try:
            return gc.submit(f"k{i % 2}", i)
        except ValueError as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=16) as pool:
        out = list(pool.map(ask, range(200)))
    assert out == [f"odd {i}" if i % 7 == 0 else i * 10 for i in range(200)]
    assert not overlap  # never two batches of one key at once
    assert max(sizes) <= 5 and sum(sizes) == 200 and max(sizes) > 1  # batched, and bounded


def test_a_failing_batch_fails_its_requests_and_the_key_recovers() -> None:
    calls = {"n": 0}

    def run(key: str, items: Sequence[str]) -> list[str | BaseException]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("database went away")
        return [s.upper() for s in items]

    gc: GroupCommit[str, str] = GroupCommit(run)
    with pytest.raises(RuntimeError, match="went away"):
        gc.submit("team", "a")
    assert gc.submit("team", "b") == "B"
