"""The domain does no file I/O: no module under gpufleet/domain imports a file or OS module or calls ``open``.

(import-linter checks third-party and package imports; this AST check covers the standard library and builtins.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DOMAIN = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "domain"
FILE_MODULES = {"pathlib", "os", "io", "shutil", "tempfile", "glob", "fileinput", "csv", "sqlite3", "socket"}


def file_io_uses(source: str) -> list[str]:
    """What in ``source`` reads or writes files: imports of file/OS modules and calls of ``open``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in FILE_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in FILE_MODULES:
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
            found.append(f"open() at line {node.lineno}")
    return found


@pytest.mark.parametrize("path", sorted(DOMAIN.rglob("*.py")), ids=lambda p: p.name)
def test_domain_module_does_no_file_io(path: Path) -> None:
    assert file_io_uses(path.read_text(encoding="utf-8")) == []


def test_the_check_sees_file_io() -> None:
    src = "from pathlib import Path\nimport os.path\n\ndef f():\n    return open('x').read()\n"
    assert file_io_uses(src) == ["from pathlib import ...", "import os.path", "open() at line 5"]
