"""The native build (scripts/build_native.py, src/gpufleet/_native.py): used only while it matches the source, and
deciding exactly what the source decides."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet import _native

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], native: bool, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GPUFLEET_NATIVE="1" if native else "0", PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args], cwd=tmp, env=env, capture_output=True, text=True, check=False
    )


def _status(native: bool, tmp: Path) -> str:
    code = "import gpufleet._native as n, json; print(json.dumps(n.status()))"
    env = dict(os.environ, GPUFLEET_NATIVE="1" if native else "0", PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=env, capture_output=True, text=True, check=True)
    return out.stdout


@pytest.mark.slow
def test_the_build_is_used_and_decides_as_the_source_does(tmp_path: Path) -> None:
    """`make test` builds it first, so it must be in use here (a stale or missing build fails this test rather
    than silently testing the pure-Python modules only); and a simulated month gives byte-identical figures with
    the compiled modules and with the same modules from source."""
    st = json.loads(_status(True, tmp_path))
    assert st["active"], f"the native build is not used: {st['reason']} (run `make native`)"
    assert json.loads(_status(False, tmp_path)) == {"active": False, "reason": "GPUFLEET_NATIVE=0", "modules": 0}
    digests = []
    for native in (True, False):
        out = tmp_path / f"{native}.json"
        r = _run(
            ["simulate", "--scenario", "default", "--seed", "5", "--days", "12", "--json", str(out)], native, tmp_path
        )
        assert r.returncode == 0, r.stderr[-2000:]
        digests.append(hashlib.sha256(out.read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def _fake_package(tmp: Path) -> Path:
    """A copy of the package's sources, with a pretend build: one empty file per extension module."""
    pkg = tmp / "gpufleet"
    shutil.copytree(_native.PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__", "_native.json"))
    return pkg


def test_a_changed_source_turns_the_build_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = _fake_package(tmp_path)
    monkeypatch.setattr(_native, "PACKAGE_DIR", pkg)
    monkeypatch.setattr(_native, "MANIFEST", pkg / "_native.json")
    monkeypatch.delenv("GPUFLEET_NATIVE", raising=False)
    assert _native.check()[:2] == (False, "not built")
    suffix = _native.importlib.machinery.EXTENSION_SUFFIXES[0]
    srcs = _native.sources()
    for p in srcs:
        p.with_suffix(suffix).write_bytes(b"")
    doc = {
        "interpreter": _native.interpreter_tag(),
        "modules": {p.relative_to(pkg).as_posix(): _native.digest(p) for p in srcs},
    }
    (pkg / "_native.json").write_text(json.dumps(doc))
    ok, reason, names = _native.check()
    assert ok, reason
    assert "gpufleet.sim.world" in names and len(names) == len(srcs)
    monkeypatch.setenv("GPUFLEET_NATIVE", "0")
    assert _native.check()[:2] == (False, "GPUFLEET_NATIVE=0")
    assert _native.check(honor_env=False)[0]
    monkeypatch.delenv("GPUFLEET_NATIVE")
    world = pkg / "sim" / "world.py"
    world.write_text(world.read_text() + "\n# edited after the build\n")
    assert _native.check()[:2] == (False, "stale: sim/world.py changed since the build")
    world.write_text(world.read_text().removesuffix("\n# edited after the build\n"))
    assert _native.check()[0]
    (pkg / "sim" / "engine.py").with_suffix(suffix).unlink()
    assert _native.check()[:2] == (False, "incomplete: no extension module for sim/engine.py")
    (pkg / "sim" / "engine.py").with_suffix(suffix).write_bytes(b"")
    doc["interpreter"] = "cpython-299-other"
    (pkg / "_native.json").write_text(json.dumps(doc))
    assert not _native.check()[0]
    (pkg / "_native.json").write_text("{not json")
    ok, reason, names = _native.check()
    assert not ok and reason.startswith("unreadable manifest") and "gpufleet.sim.world" in names


def test_the_source_only_finder_loads_the_py_beside_an_extension(tmp_path: Path) -> None:
    """An extension module that cannot load (here: an empty file) is never tried for a name the finder holds."""
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("WHERE = 'source'\n")
    (pkg / ("mod" + _native.importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"not a shared object")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from gpufleet import _native; "
        "sys.meta_path.insert(0, _native._SourceOnly(['fakepkg.mod'])); import fakepkg.mod as m; print(m.WHERE)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "source"


def _dispatched_features() -> list[str]:
    """The CPU features above numpy's baseline that its dispatch uses on this machine (AVX2, AVX-512 ...)."""
    try:
        from numpy._core import _multiarray_umath as umath  # numpy 2
    except ImportError:  # pragma: no cover - numpy 1
        from numpy.core import _multiarray_umath as umath  # type: ignore[no-redef]
    found = umath.__cpu_features__
    return [f for f in umath.__cpu_dispatch__ if found.get(f)]


@pytest.mark.slow
def test_a_seeded_run_is_the_same_on_every_cpu(tmp_path: Path) -> None:
    """numpy's exp, log and power give other last bits with AVX-512 (or AVX2) than without; a seeded run must not
    depend on the CPU it runs on. The same simulated month with numpy's SIMD dispatch on and off (down to its
    baseline) gives byte-identical figures."""
    feats = _dispatched_features()
    assert feats, "numpy dispatches nothing above its baseline on this CPU: nothing to compare"
    digests = []
    for disabled in ("", " ".join(feats)):
        out = tmp_path / f"run{len(digests)}.json"
        env = dict(os.environ, GPUFLEET_NATIVE="0", PYTHONPATH=str(ROOT / "src"), NPY_DISABLE_CPU_FEATURES=disabled)
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpufleet",
                "simulate",
                "--scenario",
                "default",
                "--seed",
                "3",
                "--days",
                "12",
                "--json",
                str(out),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        digests.append(hashlib.sha256(out.read_bytes()).hexdigest())
    assert digests[0] == digests[1]
