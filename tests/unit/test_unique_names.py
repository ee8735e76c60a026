"""One definition per noun: no class or Protocol name is defined twice under src/ (scripts/check_unique_names.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_unique_names", ROOT / "scripts" / "check_unique_names.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_src_defines_each_class_name_once() -> None:
    assert _checker().duplicates(ROOT / "src") == []


def test_checker_reports_a_twin_with_both_sites(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Thing:\n    pass\n")
    (tmp_path / "b.py").write_text("from typing import Protocol\n\n\ndef f():\n    class Thing(Protocol): ...\n")
    (tmp_path / "c.py").write_text("from a import Thing\n")  # a re-export is not a definition
    [msg] = _checker().duplicates(tmp_path)
    assert msg.startswith("Thing is defined 2 times")
    assert "a.py:1" in msg and "b.py:5" in msg
