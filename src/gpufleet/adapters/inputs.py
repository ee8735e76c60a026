"""Reading a file the user named: the one place that turns the ways a path can be wrong into a clear error.

An adapter: the domain does no file I/O (docs/design.md, "Contracts").

Every loader of user files (series, traces, cost tables, telemetry, scenarios, node and pod lists) reads
through :func:`read_input_text`, so a missing file, a directory, an unreadable file or bytes that are not
UTF-8 all give a :class:`ValidationError` naming the file (and the line of the first bad byte), never a
traceback. A UTF-8 byte-order mark (as spreadsheet programs write) is dropped. Standard library only.
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.domain.errors import ValidationError

MAX_UNIX_S = 253_402_300_799  # 9999-12-31T23:59:59Z: the last second a timestamp in an input may name


def read_input_text(path: str | Path, field: str = "path") -> str:
    """The text of the file at ``path``; ``field`` names the option or argument the path came from."""
    p = Path(path)
    if not p.exists():
        raise ValidationError(field, "file does not exist", str(p))
    if p.is_dir():
        raise ValidationError(field, "is a directory, expected a file", str(p))
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ValidationError(field, f"cannot read the file: {exc.strerror or exc}", str(p)) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValidationError(
            field, f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8", f"{p}:{line}"
        ) from None
