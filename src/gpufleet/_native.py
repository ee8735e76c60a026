"""The native build of the simulator's hot path, used only while it matches the source.

``scripts/build_native.py`` compiles the modules of :data:`NATIVE_PACKAGES` with mypyc (the same source, type
annotations and all, turned into C extension modules beside it) and writes a manifest (``_native.json``) with the
SHA-256 of each compiled source. Python's import system prefers an extension module to a ``.py`` of the same
name, so a compiled module edited afterwards would silently run its old code. :func:`guard` (called when the
``gpufleet`` package is imported, before any of its modules) prevents that: unless the manifest exists, was built
for this interpreter, and every compiled source still has its recorded hash, it makes every module of the build
load from its ``.py`` (all of them, not only the edited one: compiled modules call each other directly in C).
``GPUFLEET_NATIVE=0`` forces the pure-Python modules. Decisions are the same either way: the simulator's output is
compared byte for byte in tests/integration/test_native_build.py.

This module must stay pure Python (it is never compiled) and import nothing from the package.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

PACKAGE_DIR = Path(__file__).resolve().parent
MANIFEST = PACKAGE_DIR / "_native.json"
# What the build compiles, relative to the package: whole packages (their ``__init__`` excluded) and modules.
NATIVE_PACKAGES: tuple[str, ...] = ("sim", "control", "autoscale", "schedule", "place", "domain")
NATIVE_MODULES: tuple[str, ...] = ("ports.py",)
# Not compilable by mypyc or not worth it: pydantic models, a generic dataclass (mypyc refuses a non-native base).
NATIVE_EXCLUDE: tuple[str, ...] = ("sim/scenario.py", "domain/reservations.py")

_status: dict[str, object] = {"active": False, "reason": "not checked"}


def sources() -> list[Path]:
    """The ``.py`` files the native build compiles, in a stable order."""
    out: list[Path] = []
    for pkg in NATIVE_PACKAGES:
        for p in sorted((PACKAGE_DIR / pkg).glob("*.py")):
            rel = p.relative_to(PACKAGE_DIR).as_posix()
            if p.name != "__init__.py" and rel not in NATIVE_EXCLUDE:
                out.append(p)
    out.extend(PACKAGE_DIR / m for m in NATIVE_MODULES)
    return out


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE_DIR).with_suffix("")
    return ".".join(("gpufleet", *rel.parts))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def interpreter_tag() -> str:
    """The interpreter an extension module was built for (its ABI tag and version)."""
    return f"{sys.implementation.cache_tag}-{importlib.machinery.EXTENSION_SUFFIXES[0]}"


def _stray_extensions() -> list[str]:
    """Module names of extension modules inside the package (a build stopped half-way leaves some)."""
    names = []
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for p in PACKAGE_DIR.rglob(f"*{suffix}"):
            rel = p.relative_to(PACKAGE_DIR).as_posix()[: -len(suffix)]
            names.append(".".join(("gpufleet", *rel.split("/"))))
    return names


def check(*, honor_env: bool = True) -> tuple[bool, str, list[str]]:
    """Whether the native build may be used: (usable, reason, the modules it built). ``honor_env`` False: whether
    it matches the sources, whatever ``GPUFLEET_NATIVE`` says."""
    if honor_env and os.environ.get("GPUFLEET_NATIVE", "1") == "0":
        return False, "GPUFLEET_NATIVE=0", _listed_or_stray()
    try:
        doc = json.loads(MANIFEST.read_text())
    except FileNotFoundError:
        stray = _stray_extensions()
        return False, "not built" if not stray else "no manifest", stray
    except (OSError, ValueError) as e:
        return False, f"unreadable manifest: {e}", _stray_extensions()
    mods: dict[str, str] = doc.get("modules", {})
    names = [module_name(PACKAGE_DIR / rel) for rel in mods]
    if doc.get("interpreter") != interpreter_tag():
        return False, f"built for {doc.get('interpreter')}, running {interpreter_tag()}", names
    for rel, sha in mods.items():
        src = PACKAGE_DIR / rel
        try:
            if digest(src) != sha:
                return False, f"stale: {rel} changed since the build", names
        except OSError:
            return False, f"stale: {rel} is gone", names
    built = {p.relative_to(PACKAGE_DIR).as_posix() for p in sources()}
    if built != set(mods):
        return False, "stale: the list of compiled modules changed", names
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for rel in mods:
        if not (PACKAGE_DIR / rel).with_suffix(suffix).is_file():
            return False, f"incomplete: no extension module for {rel}", names
    return True, f"{len(mods)} modules compiled", names


def _listed_or_stray() -> list[str]:
    try:
        mods = json.loads(MANIFEST.read_text()).get("modules", {})
        return [module_name(PACKAGE_DIR / rel) for rel in mods]
    except (OSError, ValueError):
        return _stray_extensions()


class _SourceOnly(importlib.abc.MetaPathFinder):
    """Loads the named modules from their ``.py`` even where an extension module of the same name lies beside."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names or path is None:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path:
            src = os.path.join(entry, leaf)
            if os.path.isfile(src):
                return importlib.util.spec_from_file_location(fullname, src)
        return None


def guard() -> None:
    """Use the native build only if :func:`check` allows it; else load every built module from source."""
    ok, reason, names = check()
    _status.update(active=ok, reason=reason, modules=len(names) if ok else 0)
    if not ok and names and not any(isinstance(f, _SourceOnly) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceOnly(names))


def status() -> dict[str, object]:
    """Whether this process runs the native build, and why (for benchmarks and ``gpufleet version``)."""
    return dict(_status)
