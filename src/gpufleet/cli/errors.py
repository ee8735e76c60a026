"""Turning user errors into one clear line and a non-zero exit."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from gpufleet.domain.errors import GpufleetError

P = ParamSpec("P")
R = TypeVar("R")

_err = Console(stderr=True)


def _current_context() -> typer.Context | None:
    """The context of the command being run: typer >= 0.2x runs its own copy of click (``typer._click``), older
    releases run click itself."""
    for name in ("typer._click.globals", "click.globals"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        ctx: typer.Context | None = module.get_current_context(silent=True)
        return ctx
    return None


def user_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a command: a :class:`GpufleetError` or a missing file prints ``error: ...`` and exits 2. Before the
    command runs, an output file that is one of its inputs is refused (``cli.paths.check_outputs``)."""
    from gpufleet.cli.paths import check_outputs

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            ctx = _current_context()
            if ctx is not None:
                check_outputs(ctx)
            return fn(*args, **kwargs)
        except GpufleetError as exc:
            _err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except FileNotFoundError as exc:
            _err.print(
                f"[bold red]error:[/] file not found: {escape(str(exc.filename))}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(2) from None

    return wrapper
