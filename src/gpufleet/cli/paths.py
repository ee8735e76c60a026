"""Output-file options (``--json``, ``--csv``, ``--report``, ``--markdown``): checked when they are parsed, so a
path that cannot be written is refused at once, naming the option, instead of after a long run; refused when they
name a file the command reads (:func:`check_outputs`, run by ``cli.errors.user_errors`` before the command); and
written atomically (:func:`write_output`: a temporary file beside the target, renamed over it), so a write that fails
half-way (a full disk) leaves the previous file whole and is one ``error:`` line naming the option."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import typer

from gpufleet.domain.errors import ValidationError

OUTPUTS = "gpufleet.outputs"  # ctx.meta key: the output options of the command being run, {param name: option}


def output_file(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """Typer callback: ``value`` must name a file in a writable folder; missing folders are made (as every
    output option does). The option is remembered for :func:`check_outputs`."""
    if param.name is not None:
        ctx.meta.setdefault(OUTPUTS, {})[param.name] = max(param.opts, key=len)
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


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def check_outputs(ctx: typer.Context) -> None:
    """ValidationError naming the output option when an output file of the command (an option checked by
    :func:`output_file`) is a file the command reads (another option's or argument's path), or another output's."""
    outputs = ctx.meta.get(OUTPUTS, {})
    named = {p.name: max(p.opts, key=len) for p in ctx.command.params if p.name is not None}
    for name, option in outputs.items():
        out = ctx.params.get(name)
        if not isinstance(out, Path):
            continue
        for other, value in ctx.params.items():
            if other == name:
                continue
            for v in value if isinstance(value, list | tuple) else [value]:
                if isinstance(v, Path | str) and v and _same_file(out, Path(v)):
                    what = "output" if other in outputs else "input"
                    raise ValidationError(
                        option, f"{out} is also the {what} {named.get(other, other)}: the run would overwrite it"
                    )


def write_output(path: Path, text: str, option: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file in the same folder, flushed, then renamed over it).
    A failure leaves any previous file whole and is a ValidationError naming ``option``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ValidationError(option, f"cannot write {path}: {exc.strerror or exc}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
