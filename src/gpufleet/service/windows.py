"""Strict parsing of time windows such as ``7d``, ``24h``, ``2w`` (no spaces, no zero, no fractions)."""

from __future__ import annotations

import re

from gpufleet.domain.errors import ValidationError

_WINDOW = re.compile(r"([1-9][0-9]{0,3})([hdw])")
_UNIT_S = {"h": 3600, "d": 86400, "w": 7 * 86400}
MAX_WINDOW_S = 366 * 86400


def parse_window_s(text: str, *, field: str = "window") -> int:
    """``"7d"`` -> 604800. Refuses anything but ``<positive int><h|d|w>`` up to 366 days."""
    m = _WINDOW.fullmatch(text)
    if m is None:
        raise ValidationError(field, f"must look like 24h, 7d or 2w, got {text!r}")
    seconds = int(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds > MAX_WINDOW_S:
        raise ValidationError(field, f"must be at most 366d, got {text!r}")
    return seconds
