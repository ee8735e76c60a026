"""Fail when a class or Protocol name is defined twice anywhere under ``src/`` (one definition per noun).

Usage: ``python scripts/check_unique_names.py [ROOT]`` (ROOT defaults to ``src``). Exit 0 when every class name
is defined once (or is allowed below), 1 with one line per duplicate otherwise. Parsing is AST-based, so
classes nested in functions or other classes count too; a re-export (``from x import Y``) is not a definition.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

# Names defined twice on purpose, for now: the API's wire schemas in gpufleet/api/schemas*.py that mirror a
# decision type. The lead renames these classes after the security branches merge. This list may only shrink:
# every entry names the one file allowed to hold the second definition.
ALLOWED_TWINS: dict[str, str] = {
    "BudgetStatus": "gpufleet/api/schemas_plan.py",
    "Move": "gpufleet/api/schemas.py",
    "WorkloadCost": "gpufleet/api/schemas.py",
    "PlacementRequest": "gpufleet/api/schemas_plan.py",
}


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
    """One message per name defined more than once, minus the allowed API twin (which must still exist)."""
    out: list[str] = []
    for name, sites in sorted(class_definitions(root).items()):
        allowed = ALLOWED_TWINS.get(name)
        rest = [s for s in sites if allowed is None or not s[0].as_posix().endswith(allowed)]
        if allowed is not None and len(rest) == len(sites):
            out.append(f"{name}: allowed twin {allowed} no longer defines it; remove it from ALLOWED_TWINS")
        if len(rest) > 1:
            where = ", ".join(f"{p}:{line}" for p, line in rest)
            out.append(f"{name} is defined {len(rest)} times: {where}")
    return out


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
