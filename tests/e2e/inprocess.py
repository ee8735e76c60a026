"""``python -m gpufleet ARGS`` in the test's own process: ``gpufleet.cli.main.main`` (the entry point the module
runs: its one-line ``error:`` for a GpufleetError, exit 2) with ``sys.argv`` set, stdout and stderr captured and the
exit code read from SystemExit. Each subprocess start costs ~1.5 s of CPU (the interpreter and the imports); a file
checking many bad inputs of one command keeps one real subprocess test and runs the rest here."""

from __future__ import annotations

import contextlib
import io
import signal
import sys
from dataclasses import dataclass

from gpufleet.cli.main import main


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run_main(*args: str) -> Ran:
    """Any other exception than SystemExit (what a subprocess would print as a traceback) propagates."""
    out, err = io.StringIO(), io.StringIO()
    argv, sigterm = sys.argv, signal.getsignal(signal.SIGTERM)
    sys.argv = ["gpufleet", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
        signal.signal(signal.SIGTERM, sigterm)  # main() installs its own
    return Ran(code, out.getvalue(), err.getvalue())
