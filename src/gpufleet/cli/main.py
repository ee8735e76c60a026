"""The ``gpufleet`` command line.

Commands live in small modules: ``cmd_<name>.py`` registers top-level commands, ``bench_<name>.py``
registers a benchmark under ``gpufleet bench``. Each exposes ``register(app: typer.Typer) -> None``.
User errors (:class:`GpufleetError`) are printed as one clear line and exit with status 2, never a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer
from rich.console import Console
from rich.markup import escape

import gpufleet.cli as cli_pkg
from gpufleet.domain.errors import GpufleetError

app = typer.Typer(
    name="gpufleet",
    help="Plan, buy, place, pack, scale and charge for GPU capacity.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
bench_app = typer.Typer(help="Benchmarks: measured, with baselines from the same run.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

_err = Console(stderr=True)


def _register_all() -> None:
    for info in sorted(pkgutil.iter_modules(cli_pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"gpufleet.cli.{info.name}").register(app)
        elif info.name.startswith("bench_"):
            importlib.import_module(f"gpufleet.cli.{info.name}").register(bench_app)


_register_all()


def main() -> None:
    try:
        app(standalone_mode=True)
    except GpufleetError as exc:
        _err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
