"""Tiny inline-SVG charts, so the HTML report needs no JavaScript and no network."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

PALETTE = ("#2563eb", "#16a34a", "#f59e0b", "#9333ea", "#dc2626", "#0891b2", "#64748b")
W, H = 760, 260
ML, MR, MT, MB = 60, 170, 28, 32


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.1f}M"
    if a >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}" if a >= 10 else f"{v:.2g}"


def _frame(title: str, ymax: float, xlabel: str, n: int) -> list[str]:
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img">',
        f"<title>{escape(title)}</title>",
        f'<text x="{ML}" y="18" font-size="14" font-weight="600">{escape(title)}</text>',
    ]
    ph = H - MT - MB
    for i in range(5):
        y = MT + ph * i / 4
        out.append(f'<line x1="{ML}" y1="{y:.1f}" x2="{W - MR}" y2="{y:.1f}" stroke="#e5e7eb"/>')
        out.append(
            f'<text x="{ML - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{_fmt(ymax * (1 - i / 4))}</text>'
        )
    out.append(f'<text x="{(ML + W - MR) / 2}" y="{H - 6}" font-size="11" text-anchor="middle">{escape(xlabel)}</text>')
    if xlabel:
        out.append(f'<text x="{ML}" y="{H - 18}" font-size="10">0</text>')
        out.append(f'<text x="{W - MR}" y="{H - 18}" font-size="10" text-anchor="end">{n - 1}</text>')
    return out


def _points(vals: Sequence[float], base: Sequence[float] | None, ymax: float) -> list[tuple[float, float]]:
    n = max(len(vals), 2)
    pw, ph = W - ML - MR, H - MT - MB
    b = base or [0.0] * len(vals)
    return [(ML + pw * i / (n - 1), MT + ph * (1 - (v + b[i]) / ymax)) for i, v in enumerate(vals)]


def _legend(names: Sequence[str]) -> list[str]:
    out = []
    for i, name in enumerate(names):
        y = MT + 14 * i
        c = PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{W - MR + 10}" y="{y}" width="10" height="10" fill="{c}"/>')
        out.append(f'<text x="{W - MR + 24}" y="{y + 9}" font-size="11">{escape(name)}</text>')
    return out


def _downsample(vals: Sequence[float], max_points: int = 400) -> list[float]:
    if len(vals) <= max_points:
        return list(vals)
    step = len(vals) / max_points
    return [float(vals[int(i * step)]) for i in range(max_points)]


def area_line_chart(
    title: str, stacked: dict[str, Sequence[float]], lines: dict[str, Sequence[float]], xlabel: str = "hour"
) -> str:
    """Stacked areas (e.g. supply by tier) with lines on top (e.g. demand)."""
    st = {k: _downsample(v) for k, v in stacked.items()}
    ln = {k: _downsample(v) for k, v in lines.items()}
    n = max([len(v) for v in [*st.values(), *ln.values()]] or [2])
    tot = [sum(v[i] for v in st.values()) for i in range(n)] if st else [0.0] * n
    ymax = max([*tot, *[x for v in ln.values() for x in v], 1.0]) * 1.05
    out = _frame(title, ymax, xlabel, n)
    base = [0.0] * n
    for i, (_name, vals) in enumerate(st.items()):
        top = _points(vals, base, ymax)
        bot = list(reversed(_points([0.0] * n, base, ymax)))
        d = " ".join(f"{x:.1f},{y:.1f}" for x, y in [*top, *bot])
        out.append(f'<polygon class="series" points="{d}" fill="{PALETTE[i % len(PALETTE)]}" fill-opacity="0.55"/>')
        base = [base[j] + vals[j] for j in range(n)]
    for j, (_name, vals) in enumerate(ln.items()):
        d = " ".join(f"{x:.1f},{y:.1f}" for x, y in _points(vals, None, ymax))
        c = PALETTE[(len(st) + j) % len(PALETTE)]
        out.append(f'<polyline class="series" points="{d}" fill="none" stroke="{c}" stroke-width="1.6"/>')
    out += _legend([*st, *ln])
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(title: str, values: dict[str, float], unit: str = "$") -> str:
    items = list(values.items())
    ymax = max([v for _, v in items] + [1.0]) * 1.1
    out = _frame(title, ymax, "", 2)
    pw, ph = W - ML - MR, H - MT - MB
    bw = pw / max(len(items), 1)
    for i, (name, v) in enumerate(items):
        h = ph * v / ymax
        x = ML + i * bw + bw * 0.15
        c = PALETTE[i % len(PALETTE)]
        out.append(
            f'<rect class="series" x="{x:.1f}" y="{MT + ph - h:.1f}" width="{bw * 0.7:.1f}" height="{h:.1f}" fill="{c}"/>'
        )
        out.append(
            f'<text x="{x + bw * 0.35:.1f}" y="{H - 8}" font-size="11" text-anchor="middle">{escape(name)}</text>'
        )
        out.append(
            f'<text x="{x + bw * 0.35:.1f}" y="{MT + ph - h - 4:.1f}" font-size="10" text-anchor="middle">{unit}{_fmt(v)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)
