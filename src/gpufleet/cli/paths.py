"""Checking output-file options (``--json``, ``--csv``, ``--report``, ``--markdown``) when they are parsed, so a
path that cannot be written is refused at once, naming the option, instead of after a long run."""

from __future__ import annotations

import os
from pathlib import Path

import typer


def output_file(value: Path | None) -> Path | None:
    """Typer callback: ``value`` must name a file in a writable folder; missing folders are made (as every
    output option does)."""
    if value is None:
        return None
    if value.is_dir():
        raise typer.BadParameter(f"{value} is a directory; give a file name")
    parent = value.parent
    for folder in (parent, *parent.parents):
        if folder.exists():
            if not folder.is_dir():
                raise typer.BadParameter(f"{folder} is a file, so {value} cannot be created")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise typer.BadParameter(f"cannot write in {folder}")
            break
    parent.mkdir(parents=True, exist_ok=True)
    return value
