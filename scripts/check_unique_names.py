"""Fail when a class or Protocol name is defined twice anywhere under ``src/`` (one definition per noun).

Usage: ``python scripts/check_unique_names.py [ROOT]`` (ROOT defaults to ``src``). Exit 0 when every class name
is defined once, 1 with one line per duplicate otherwise. Parsing is AST-based, so
classes nested in functions or other classes count too; a re-export (``from x import Y``) is not a definition.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path


def class_definitions(root: Path) -> dict[str, list[tuple[Path, int]]]:
    """Every class name under ``root`` with the files and lines that define it, in path order."""
    found: dict[str, list[tuple[Path, int]]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found[node.name].append((path, node.lineno))
    return found


def duplicates(root: Path) -> list[str]:
    """One message per name defined more than once (no exceptions: one definition per noun)."""
    return [
        f"{name} is defined {len(sites)} times: " + ", ".join(f"{p}:{line}" for p, line in sites)
        for name, sites in sorted(class_definitions(root).items())
        if len(sites) > 1
    ]


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path("src")
    if not root.is_dir():
        print(f"check_unique_names: {root} is not a directory", file=sys.stderr)
        return 2
    problems = duplicates(root)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
