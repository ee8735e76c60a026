"""Decision code draws randomness only from generators it is given or seeds itself: ``default_rng()`` and
``SeedSequence()`` without a seed (OS entropy) are refused there. ruff TID251 (pyproject.toml) bans the global
numpy/stdlib generators and the clock; this covers the unseeded constructor, which banned-api cannot tell apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "gpufleet"
DECISION = ("forecast", "procure", "place", "schedule", "autoscale", "cost", "control", "domain")
FILES = [*sorted(p for pkg in DECISION for p in (SRC / pkg).rglob("*.py")), SRC / "ports.py"]


def unseeded_generators(source: str) -> list[int]:
    """Lines that build a numpy generator or seed sequence from OS entropy (no argument)."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("default_rng", "SeedSequence"):
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_decision_module_builds_no_unseeded_generator(path: Path) -> None:
    assert unseeded_generators(path.read_text(encoding="utf-8")) == []


def test_the_check_sees_an_unseeded_generator() -> None:
    src = (
        "import numpy as np\na = np.random.default_rng(7)\nb = np.random.default_rng()\nc = np.random.SeedSequence()\n"
    )
    assert unseeded_generators(src) == [3, 4]
