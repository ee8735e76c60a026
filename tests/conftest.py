"""Shared fixtures. ``SHARED_DATA`` is ../shared/data; tests that need it skip cleanly when it is absent."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO.parent / "shared" / "data").resolve()

# No per-example deadline: the properties are what the tests check, not how fast one example runs. Hypothesis's
# default 200 ms deadline failed a forecast property (an example took 1.7 s, then 0.17 s on replay: "unreliable
# timings") with two xdist workers on a loaded 2-core machine. Tests that set their own settings keep them.
settings.register_profile("gpufleet", deadline=None)
settings.load_profile("gpufleet")

# Files that share one expensive session fixture run on one xdist worker (prefix -> work unit); every other file
# is its own unit (``--dist loadfile``). One kube-apiserver + etcd (started once: tens of seconds here) serves
# tests/integration/k8s; one moto_server tests/integration/aws.
SHARED_SESSION_UNITS = ("tests/integration/k8s/", "tests/integration/aws/")


@pytest.hookimpl(optionalhook=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With the native build in use (src/gpufleet/_native.py), the tests marked ``source_only`` (they patch or
    subclass the pure-Python source's internals) are deselected here and run in the source-only lane
    (``GPUFLEET_NATIVE=0 ... -m source_only``, Makefile), which every ``make test*`` runs after this one."""
    from gpufleet import _native

    if not _native.status()["active"]:
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("source_only") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, except that the files under each SHARED_SESSION_UNITS folder form one unit."""
    if config.option.dist != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _SharedSessionScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((unit for unit in SHARED_SESSION_UNITS if path.startswith(unit)), path)

    return _SharedSessionScheduling(config, log)


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
