"""Numbers for people: $4.41M, 72.1%, 3.2 h, 0.973x; "n/a" for what is missing or not finite.

Every report face (terminal, HTML, SVG axis labels) formats through these, so a figure reads the same everywhere.
"""

from __future__ import annotations

import math

from gpufleet.domain.skus import SKUS_BY_ID

NA = "n/a"
_UNITS_UP = ((1e3, "k"), (1e6, "M"), (1e9, "B"), (1e12, "T"))


def _finite(x: float | None) -> bool:
    return x is not None and isinstance(x, int | float) and math.isfinite(x)


def _sig3(a: float) -> str:
    """``a`` >= 0, below 1000 after scaling: three significant digits, trailing zeros kept (4.40, 44.0, 440)."""
    if a >= 99.95:
        return f"{a:.0f}"
    if a >= 9.995:
        return f"{a:.1f}"
    return f"{a:.2f}"


def short(x: float | None) -> str:
    """1234 -> 1.23k, 4_408_000 -> 4.41M, 12 -> 12, 0.5 -> 0.50: three significant digits from 1000 up."""
    if not _finite(x):
        return NA
    assert x is not None
    sign = "-" if x < 0 else ""
    a = abs(float(x))
    if a < 999.5:
        return f"{sign}{a:.0f}" if a >= 99.5 or a == int(a) else f"{sign}{_sig3(a)}"
    for scale, suffix in _UNITS_UP:
        txt = _sig3(a / scale)
        if float(txt) < 1000:  # pick the unit after rounding: 999,999 reads 1.00M, not 1000k
            return f"{sign}{txt}{suffix}"
    return f"{sign}{a / 1e12:,.0f}T"


def usd(x: float | None) -> str:
    """$4.41M, $312k, $880, $4.41; negative amounts as -$1.20k."""
    if not _finite(x):
        return NA
    assert x is not None
    sign = "-" if x < 0 else ""
    a = abs(float(x))
    if a == 0:
        return "$0"
    if a < 10:
        return f"{sign}${a:.2f}"
    if a < 999.5:
        return f"{sign}${a:.0f}" if a == round(a) else f"{sign}${_sig3(a)}"
    return f"{sign}${short(a)}"


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage: 0.721 -> 72.1%."""
    if not _finite(x):
        return NA
    assert x is not None
    return f"{x * 100:.{digits}f}%"


def attainment(x: float | None) -> str:
    """A fraction close to 1 (an SLO): as many decimals as it takes not to print 100% for less than all,
    at least one and at most four: 0.99958 -> 99.96%, 1.0 -> 100.0%."""
    if not _finite(x):
        return NA
    assert x is not None
    for digits in range(1, 5):
        s = f"{x * 100:.{digits}f}"
        if x >= 1.0 or float(s) < 100.0:
            return f"{s}%"
    return f"{math.floor(x * 1e6) / 1e4:.4f}%"


def duration(seconds: float | None) -> str:
    """Seconds for people: 45 s, 12.5 min, 3.2 h, 2.1 d."""
    if not _finite(seconds):
        return NA
    assert seconds is not None
    s = float(seconds)
    sign = "-" if s < 0 else ""
    a = abs(s)
    if a < 59.5:
        return f"{sign}{a:.0f} s"
    if a < 59.95 * 60:
        return f"{sign}{a / 60:.1f} min"
    if a < 47.95 * 3600:
        return f"{sign}{a / 3600:.1f} h"
    return f"{sign}{a / 86400:.1f} d"


def count(n: float | None) -> str:
    """1731 -> 1,731."""
    if not _finite(n):
        return NA
    assert n is not None
    return f"{n:,.0f}"


def gpu_hours(x: float | None) -> str:
    if not _finite(x):
        return NA
    assert x is not None
    return f"{x:,.0f} GPU-h" if abs(x) < 1e6 else f"{short(x)} GPU-h"


def ratio(x: float | None) -> str:
    """0.9731 -> 0.973x."""
    if not _finite(x):
        return NA
    assert x is not None
    return f"{x:.3f}x"


def day(d: float | None) -> str:
    if not _finite(d):
        return NA
    assert d is not None
    return f"day {d:.0f}" if abs(d - round(d)) < 0.05 else f"day {d:.1f}"


def sku_label(sku_id: str | None) -> str:
    """h100_80gb -> H100 (the model from the catalog's name); an unknown id stays as it is."""
    if not sku_id:
        return "?"
    sku = SKUS_BY_ID.get(sku_id)
    if sku is None:
        return sku_id
    words = sku.name.split()
    return words[1] if len(words) > 1 and words[0] == "NVIDIA" else sku.name


def tier_label(tier: str) -> str:
    return tier.replace("_", "-")
