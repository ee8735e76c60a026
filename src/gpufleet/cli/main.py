"""The ``gpufleet`` command line.

Commands live in small modules: ``cmd_<name>.py`` registers top-level commands, ``bench_<name>.py``
registers a benchmark under ``gpufleet bench``. Each exposes ``register(app: typer.Typer) -> None``.
User errors (:class:`GpufleetError`) are printed as one clear line and exit with status 2, never a traceback.

A run imports only the module of the command it names (:data:`COMMANDS`, :data:`BENCHES`): importing every
command pulls in the simulator, the forecasters, scipy and pandas (~4 s of CPU on a slow machine), which
``gpufleet token list`` does not need. Help, no command or an unknown name register every module, so typer lists
them all. tests/unit/test_cli_lazy.py checks the tables against what the modules register.
"""

from __future__ import annotations

import importlib
import pkgutil
import signal
import sys
from collections.abc import Sequence

import typer
from rich.console import Console
from rich.markup import escape

import gpufleet.cli as cli_pkg
from gpufleet.domain.errors import GpufleetError

# command name -> the module under gpufleet.cli that registers it
COMMANDS: dict[str, str] = {
    "controller": "cmd_controller",
    "cost": "cmd_cost",
    "db": "cmd_db",
    "forecast": "cmd_forecast",
    "k8s": "cmd_k8s",
    "plan": "cmd_plan",
    "reconcile": "cmd_reconcile",
    "serve": "cmd_serve",
    "simulate": "cmd_simulate",
    "token": "cmd_token",
}
BENCHES: dict[str, str] = {
    "api": "bench_api",
    "autoscale": "bench_autoscale",
    "binpack": "bench_binpack",
    "calibrate": "bench_calibrate",
    "cluster-autoscale": "bench_cluster_autoscale",
    "cost": "bench_cost",
    "forecast": "bench_forecast",
    "forecast-scale": "bench_forecast_scale",
    "generalize": "bench_generalize",
    "k8s": "bench_k8s",
    "loop": "bench_loop",
    "portfolio": "bench_portfolio",
    "procure": "bench_procure",
    "procure-loop": "bench_procure",
    "sched-throughput": "bench_sched_throughput",
    "sim": "bench_sim",
}

_err = Console(stderr=True)


def all_modules() -> tuple[list[str], list[str]]:
    """Every ``cmd_*`` and ``bench_*`` module of the package, by name."""
    names = sorted(m.name for m in pkgutil.iter_modules(cli_pkg.__path__))
    return [n for n in names if n.startswith("cmd_")], [n for n in names if n.startswith("bench_")]


def modules_for(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The command and bench modules a run with these arguments needs: the named command's module alone, or every
    module when the arguments name none that is known (help, no arguments, a typo: typer then lists them all)."""
    if argv and argv[0] == "bench":
        if len(argv) > 1 and argv[1] in BENCHES:
            return [], [BENCHES[argv[1]]]
    elif argv and argv[0] in COMMANDS:
        return [COMMANDS[argv[0]]], []
    return all_modules()


def build_app(argv: Sequence[str] | None = None) -> typer.Typer:
    """The command line with the modules ``argv`` needs registered (all of them when ``argv`` is None)."""
    app = typer.Typer(
        name="gpufleet",
        help="Plan, buy, place, pack, scale and charge for GPU capacity.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )
    bench_app = typer.Typer(help="Benchmarks: measured, with baselines from the same run.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")
    commands, benches = all_modules() if argv is None else modules_for(argv)
    for name in commands:
        importlib.import_module(f"gpufleet.cli.{name}").register(app)
    for name in benches:
        importlib.import_module(f"gpufleet.cli.{name}").register(bench_app)
    return app


def __getattr__(name: str) -> typer.Typer:
    """``from gpufleet.cli.main import app``: the whole command line (every module registered), built once."""
    if name == "app":
        app = build_app()
        globals()["app"] = app
        return app
    raise AttributeError(name)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    # SIGTERM ends every command as an exception would (finally blocks run, transactions roll back), exit 143. Also
    # what makes it end at all in a container: the entrypoint execs gpufleet as PID 1, and the kernel drops a signal
    # PID 1 has no handler for. `serve` (uvicorn) and `controller` install their own graceful handlers over this.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        build_app(sys.argv[1:])(standalone_mode=True)
    except GpufleetError as exc:
        _err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
