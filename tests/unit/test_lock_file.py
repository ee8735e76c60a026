"""requirements.lock (what the container image installs, with hashes) covers every runtime dependency in
pyproject.toml: a dependency added without re-running scripts/lock-deps.sh breaks the image at start-up."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def test_every_runtime_dependency_is_pinned_in_the_lock_file() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    locked = {
        _name(line) for line in (REPO / "requirements.lock").read_text().splitlines() if re.match(r"^[A-Za-z0-9]", line)
    }
    missing = sorted(_name(d) for d in deps if _name(d) not in locked)
    assert not missing, f"run scripts/lock-deps.sh: requirements.lock lacks {missing}"
