"""Compile the simulator's hot path with mypyc, in place beside its sources (``make setup`` runs this).

    python scripts/build_native.py            # build if the manifest does not match the sources; else nothing
    python scripts/build_native.py --force    # rebuild
    python scripts/build_native.py --clean    # remove the build: every module runs from its .py
    python scripts/build_native.py --status   # print whether the build is used, and why

What is compiled and how the package decides to use it: ``src/gpufleet/_native.py``. The build type-checks the
modules again (mypyc needs the types) with the project's mypy settings minus the pydantic plugin (no compiled
module defines a pydantic model). It takes a few minutes on two cores; a failed build leaves no manifest, so the
package runs from source (the script still exits 0 unless ``GPUFLEET_NATIVE_STRICT=1``; `make test` fails on a
missing build anyway). ``GPUFLEET_NATIVE_BUILD=0`` skips the build (e.g. on a machine without a C compiler).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))

from gpufleet import _native  # noqa: E402  (the path above first)

MYPY_INI = """\
[mypy]
python_version = 3.11
strict = True
mypy_path = .
ignore_missing_imports = True
"""

SETUP = """\
import sys
from setuptools import setup
from mypyc.build import mypycify

files = sys.argv[1:]
sys.argv = [sys.argv[0], "build_ext", "--inplace", "--parallel", "{jobs}"]
setup(
    name="gpufleet-native",
    ext_modules=mypycify(["--config-file", "{ini}", *files], opt_level="3", multi_file=True, group_name="gpufleet_native"),
)
"""


def clean() -> None:
    """Remove every extension module inside the package, the group library and the manifest."""
    _native.MANIFEST.unlink(missing_ok=True)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for p in [*_native.PACKAGE_DIR.rglob(f"*{suffix}"), *SRC.glob(f"*{suffix}")]:
            p.unlink()


def build() -> int:
    srcs = _native.sources()
    clean()
    rels = [p.relative_to(SRC).as_posix() for p in srcs]
    with tempfile.TemporaryDirectory(prefix="gpufleet-native-") as tmp:
        ini = Path(tmp) / "mypy.ini"
        ini.write_text(MYPY_INI)
        setup_py = Path(tmp) / "setup_native.py"
        setup_py.write_text(SETUP.format(ini=ini, jobs=os.cpu_count() or 1))
        t0 = time.monotonic()
        env = dict(os.environ, PYTHONPATH=str(SRC))
        # the build directory of setuptools and mypyc's C files go under build/ (git-ignored)
        proc = subprocess.run(
            [sys.executable, str(setup_py), *rels], cwd=SRC, env=env, capture_output=True, text=True, check=False
        )
        shutil.rmtree(SRC / "build", ignore_errors=True)
    if proc.returncode != 0:
        clean()
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        sys.stderr.write("native build failed: the package runs from source (slower, same decisions)\n")
        # not an error for `make run` (the source is the same program); `make test` fails on it
        # (tests/integration/test_native_build.py asserts the build is in use)
        return 1 if os.environ.get("GPUFLEET_NATIVE_STRICT") == "1" else 0
    doc = {
        "interpreter": _native.interpreter_tag(),
        "built_s": round(time.monotonic() - t0, 1),
        "modules": {p.relative_to(_native.PACKAGE_DIR).as_posix(): _native.digest(p) for p in srcs},
    }
    _native.MANIFEST.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"native build: {len(srcs)} modules compiled in {doc['built_s']} s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="rebuild even if the build matches the sources")
    ap.add_argument("--clean", action="store_true", help="remove the build")
    ap.add_argument("--status", action="store_true", help="print whether the build is used, and why")
    args = ap.parse_args()
    if args.clean:
        clean()
        return 0
    ok, reason, _ = _native.check(honor_env=args.status)
    if args.status:
        print(("used: " if ok else "not used: ") + reason)
        return 0
    if os.environ.get("GPUFLEET_NATIVE_BUILD", "1") == "0":
        print("native build skipped (GPUFLEET_NATIVE_BUILD=0)")
        return 0
    if ok and not args.force:
        return 0
    return build()


if __name__ == "__main__":
    sys.exit(main())
