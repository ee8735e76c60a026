#!/usr/bin/env python3
"""Replay every known attack against a gpufleet server and print the failures (exit 1 if any).

    .venv/bin/python scripts/replay_attacks.py                 # a fresh SQLite store, server started here
    .venv/bin/python scripts/replay_attacks.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test

The script migrates the store, starts ``gpufleet serve`` on a free loopback port, runs each module in
scripts/attacks/ (``run(ctx) -> list[Result]``), stops the server and prints one line per attack.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attacks.ctx import GPUFLEET, Ctx, Result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before answering /healthz")
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"server did not answer {url}/healthz within {timeout_s:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="SQLAlchemy URL of the store (default: a new SQLite file)")
    parser.add_argument("--only", help="run only this attack module (e.g. approvals)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpufleet-attacks-") as tmp:
        db = args.db or f"sqlite:///{tmp}/attacks.db"
        subprocess.run([GPUFLEET, "db", "upgrade", "--db", db], check=True, capture_output=True, timeout=120)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [GPUFLEET, "serve", "--db", db, "--port", str(port), "--log-level", "warning"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _wait_healthy(url, proc)
            ctx = Ctx(base_url=url, db_url=db)
            results: list[Result] = []
            import attacks

            for mod in sorted(m.name for m in pkgutil.iter_modules(attacks.__path__)):
                if mod == "ctx" or (args.only and mod != args.only):
                    continue
                results += [
                    Result(f"{mod}: {r.name}", r.held, r.detail)
                    for r in importlib.import_module(f"attacks.{mod}").run(ctx)
                ]
        finally:
            proc.terminate()
            try:
                _, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
    tracebacks = err.decode(errors="replace").count("Traceback (most recent call last)")
    if tracebacks:
        results.append(Result("server log: no tracebacks", False, f"{tracebacks} tracebacks logged"))
    failed = [r for r in results if not r.held]
    for r in results:
        print(f"{'held' if r.held else 'FAIL'}  {r.name}" + (f"  ({r.detail})" if r.detail else ""))
    print(f"{len(results)} attacks, {len(failed)} failures")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    raise SystemExit(main())
