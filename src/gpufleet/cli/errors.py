"""Turning user errors into one clear line and a non-zero exit."""

from __future__ import annotations

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


def user_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a command: a :class:`GpufleetError` or a missing file prints ``error: ...`` and exits 2."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
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
