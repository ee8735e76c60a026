"""Shared fixtures. ``SHARED_DATA`` is ../shared/data; tests that need it skip cleanly when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO.parent / "shared" / "data").resolve()


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent")
    return SHARED_DATA


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under ``GPUFLEET_FORBID_SKIPS=1`` (set by .ci/run) a skipped test fails: every lane (PostgreSQL, browser,
    Kubernetes API server, AWS fakes, container image, ../shared/data) must run in CI here, not skip quietly."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get("GPUFLEET_FORBID_SKIPS") == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where every lane must run (GPUFLEET_FORBID_SKIPS=1): {reason}"
