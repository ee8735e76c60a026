"""Inline-SVG charts for the HTML report: no JavaScript, no network.

Every chart has a title, a y axis with ticks and a unit, an x axis in days with ticks, and a legend. Drawn marks
(lines, areas, bars) carry ``class="series"`` so a browser test can check each chart drew something.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from gpufleet.report.fmt import short


def axis_num(v: float) -> str:
    """Tick labels: 1,000 and 250 as they are, 12.5k and 2.5M short, 0.25 with its decimals."""
    if v == int(v) and abs(v) < 10_000:
        return f"{v:,.0f}"
    return short(v)


PALETTE = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#64748b", "#ca8a04")
TIER_COLORS = {"reserved": "#0f766e", "on_demand": "#f59e0b", "spot": "#84cc16", "secondary": "#a855f7"}
LOOP_COLORS = {"gpufleet": "#2563eb", "common_practice": "#dc2626", "baseline": "#6b7280"}
BOUND_COLOR = "#111827"


def loop_color(name: str, i: int) -> str:
    return LOOP_COLORS.get(name, PALETTE[(i + 3) % len(PALETTE)])


W, H = 980, 360
ML, MR, MT, MB = 78, 28, 62, 50  # plot margins: left (y labels), right, top (title + legend), bottom (x axis)
MAX_POINTS = 720  # per line (4 per day over 180 days)


@dataclass(frozen=True, slots=True)
class Line:
    name: str
    values: Sequence[float]
    color: str | None = None
    dashed: bool = False
    width: float = 2.0


def nice_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2, 2.5 or 5 times a power of ten), at most ``most``."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    span = hi - lo
    raw = span / max(most - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    if ticks[-1] < hi:
        ticks.append(round(v, 10))
    return ticks


def day_ticks(days: float) -> list[float]:
    """Tick days at a step a reader counts in (1, 2, 5, 7, 10, 14, 30, 60, 90 ...), at most 12 ticks."""
    for step in (1, 2, 5, 7, 10, 14, 15, 30, 60, 90, 180, 365):
        if days / step <= 12:
            break
    return [float(d) for d in range(0, int(days) + 1, step)]


def bucket(xs: Sequence[float], ys: Sequence[float], how: str = "mean") -> tuple[list[float], list[float]]:
    """At most MAX_POINTS points: the mean (or max) of each run of samples, at the run's first x."""
    n = min(len(xs), len(ys))
    if n <= MAX_POINTS:
        return [float(x) for x in xs[:n]], [float(y) for y in ys[:n]]
    k = math.ceil(n / MAX_POINTS)
    bx, by = [], []
    for i in range(0, n, k):
        chunk = [float(y) for y in ys[i : i + k]]
        bx.append(float(xs[i]))
        by.append(max(chunk) if how == "max" else sum(chunk) / len(chunk))
    return bx, by


class _Plot:
    """Coordinates and axes for one chart."""

    def __init__(self, title: str, x_max: float, y_max: float, y_label: str, y_fmt: Callable[[float], str]) -> None:
        self.x_max = x_max if x_max > 0 else 1.0
        self.yt = nice_ticks(0.0, y_max if y_max > 0 else 1.0, 6)
        self.y_max = self.yt[-1]
        self.pw, self.ph = W - ML - MR, H - MT - MB
        self.out = [
            f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" '
            f'width="{W}" height="{H}" role="img" aria-label="{escape(title)}">',
            f"<title>{escape(title)}</title>",
            f'<text x="{ML}" y="22" font-size="16" font-weight="600">{escape(title)}</text>',
        ]
        for v in self.yt:
            y = self.y(v)
            self.out.append(f'<line x1="{ML}" y1="{y:.1f}" x2="{W - MR}" y2="{y:.1f}" stroke="#e5e7eb"/>')
            self.out.append(
                f'<text x="{ML - 8}" y="{y + 4:.1f}" font-size="12" text-anchor="end">{escape(y_fmt(v))}</text>'
            )
        self.out.append(
            f'<text x="16" y="{MT + self.ph / 2:.1f}" font-size="12" text-anchor="middle" '
            f'transform="rotate(-90 16 {MT + self.ph / 2:.1f})">{escape(y_label)}</text>'
        )
        self.out.append(f'<line x1="{ML}" y1="{MT + self.ph}" x2="{W - MR}" y2="{MT + self.ph}" stroke="#6b7280"/>')
        self.out.append(f'<line x1="{ML}" y1="{MT}" x2="{ML}" y2="{MT + self.ph}" stroke="#6b7280"/>')

    def x(self, v: float) -> float:
        return ML + self.pw * v / self.x_max

    def y(self, v: float) -> float:
        return MT + self.ph * (1 - v / self.y_max)

    def day_axis(self) -> None:
        for d in day_ticks(self.x_max):
            x = self.x(d)
            self.out.append(
                f'<line x1="{x:.1f}" y1="{MT + self.ph}" x2="{x:.1f}" y2="{MT + self.ph + 5}" stroke="#6b7280"/>'
            )
            self.out.append(
                f'<text x="{x:.1f}" y="{MT + self.ph + 19}" font-size="12" text-anchor="middle">{d:.0f}</text>'
            )
        self.out.append(
            f'<text x="{ML + self.pw / 2:.1f}" y="{H - 8}" font-size="12" text-anchor="middle">'
            "day of the simulation</text>"
        )

    def legend(self, items: Sequence[tuple[str, str, bool]]) -> None:
        """One row under the title: (name, color, dashed)."""
        x = float(ML)
        for name, color, dashed in items:
            dash = ' stroke-dasharray="6 4"' if dashed else ""
            self.out.append(
                f'<line x1="{x:.1f}" y1="42" x2="{x + 22:.1f}" y2="42" stroke="{color}" stroke-width="4"{dash}/>'
            )
            self.out.append(f'<text x="{x + 28:.1f}" y="46" font-size="12">{escape(name)}</text>')
            x += 40 + 7.2 * len(name)

    def svg(self) -> str:
        return "\n".join([*self.out, "</svg>"])


def time_chart(
    title: str,
    days: Sequence[float],
    lines: Sequence[Line],
    *,
    stacked: Sequence[Line] = (),
    y_label: str,
    y_fmt: Callable[[float], str] = axis_num,
    how: str = "mean",
    y_floor: float = 0.0,
    end_marks: Sequence[tuple[str, float, str]] = (),
    x_max: float | None = None,
    y_max: float | None = None,
) -> str:
    """Lines (and optional stacked areas under them) over the days of the run; ``end_marks`` (label, value,
    color) are totals with no time course (a bound), drawn as a diamond at the last day."""
    if x_max is None:
        x_max = float(days[-1]) if len(days) else 1.0
    st = [(s, *bucket(days, s.values, how)) for s in stacked]
    ln = [(s, *bucket(days, s.values, how)) for s in lines]
    n = len(st[0][1]) if st else 0
    tops = [sum(v[2][i] for v in st) for i in range(n)]
    peak = max([*tops, *[y for _, _, ys in ln for y in ys], *[v for _, v, _ in end_marks], y_floor, 0.0])
    top_y = y_max if y_max is not None else (peak * 1.04 if peak > 0 else 1.0)
    p = _Plot(title, x_max, top_y, y_label, y_fmt)
    base = [0.0] * n
    items: list[tuple[str, str, bool]] = []
    for i, (s, xs, ys) in enumerate(st):
        color = s.color or PALETTE[i % len(PALETTE)]
        top = [(p.x(x), p.y(base[j] + ys[j])) for j, x in enumerate(xs)]
        bot = [(p.x(x), p.y(base[j])) for j, x in reversed(list(enumerate(xs)))]
        pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in [*top, *bot])
        p.out.append(f'<polygon class="series" points="{pts}" fill="{color}" fill-opacity="0.45" stroke="none"/>')
        base = [base[j] + ys[j] for j in range(n)]
        items.append((s.name, color, False))
    for i, (s, xs, ys) in enumerate(ln):
        color = s.color or PALETTE[(len(st) + i) % len(PALETTE)]
        pts = " ".join(f"{p.x(x):.1f},{p.y(y):.1f}" for x, y in zip(xs, ys, strict=True))
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        p.out.append(
            f'<polyline class="series" points="{pts}" fill="none" stroke="{color}" '
            f'stroke-width="{s.width}" stroke-linejoin="round"{dash}/>'
        )
        items.append((s.name, color, s.dashed))
    for name, v, color in end_marks:
        cx, cy = p.x(x_max), p.y(v)
        p.out.append(
            f'<path class="series" d="M{cx:.1f},{cy - 7:.1f} L{cx + 7:.1f},{cy:.1f} L{cx:.1f},{cy + 7:.1f} '
            f'L{cx - 7:.1f},{cy:.1f} Z" fill="{color}"/>'
        )
        p.out.append(
            f'<line x1="{p.x(x_max * 0.9):.1f}" y1="{cy:.1f}" x2="{cx:.1f}" y2="{cy:.1f}" stroke="{color}" '
            'stroke-width="2" stroke-dasharray="4 3"/>'
        )
        p.out.append(
            f'<text x="{cx - 10:.1f}" y="{cy + 20:.1f}" font-size="12" text-anchor="end" fill="{color}">'
            f"{escape(name)}</text>"
        )
        items.append((name, color, True))
    p.day_axis()
    p.legend(items)
    return p.svg()


@dataclass(frozen=True, slots=True)
class Segment:
    name: str
    value: float
    color: str
    faded: bool = False


def stacked_bars(
    title: str,
    rows: Sequence[tuple[str, Sequence[Segment], str]],
    *,
    x_label: str,
    x_fmt: Callable[[float], str],
    legend: Sequence[tuple[str, str, bool]],
) -> str:
    """Horizontal bars, one per row (label, segments, text at the end of the bar), segments stacked left to right;
    a faded segment is drawn light (e.g. the idle part of a tier)."""
    label_w = max(120, 20 + int(7.6 * max([len(label) for label, _, _ in rows] or [0])))
    top = 62
    bar_h, gap = 30, 16
    h = top + len(rows) * (bar_h + gap) + 56
    pw = W - label_w - 110
    total_max = max([sum(s.value for s in segs) for _, segs, _ in rows] + [1.0])
    ticks = nice_ticks(0.0, total_max, 6)
    x_max = ticks[-1]
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h}" '
        f'width="{W}" height="{h}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{ML}" y="22" font-size="16" font-weight="600">{escape(title)}</text>',
    ]
    axis_y = top + len(rows) * (bar_h + gap)
    for t in ticks:
        x = label_w + pw * t / x_max
        out.append(f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{axis_y}" stroke="#e5e7eb"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 16}" font-size="12" text-anchor="middle">{escape(x_fmt(t))}</text>')
    out.append(
        f'<text x="{label_w + pw / 2:.1f}" y="{axis_y + 38}" font-size="12" text-anchor="middle">{escape(x_label)}</text>'
    )
    for i, (label, segs, end_text) in enumerate(rows):
        y = top + i * (bar_h + gap)
        out.append(
            f'<text x="{label_w - 10}" y="{y + bar_h / 2 + 5:.1f}" font-size="13" text-anchor="end">{escape(label)}</text>'
        )
        x = float(label_w)
        for s in segs:
            w = pw * s.value / x_max
            if w < 0.05:  # would draw as nothing at one decimal
                continue
            op = "0.35" if s.faded else "0.95"
            out.append(
                f'<rect class="series" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{s.color}" '
                f'fill-opacity="{op}"><title>{escape(s.name)}: {escape(x_fmt(s.value))}</title></rect>'
            )
            x += w
        out.append(f'<text x="{x + 8:.1f}" y="{y + bar_h / 2 + 5:.1f}" font-size="13">{escape(end_text)}</text>')
    lx = float(ML)
    for name, color, faded in legend:
        op = "0.35" if faded else "0.95"
        out.append(f'<rect x="{lx:.1f}" y="34" width="14" height="12" fill="{color}" fill-opacity="{op}"/>')
        out.append(f'<text x="{lx + 20:.1f}" y="45" font-size="12">{escape(name)}</text>')
        lx += 34 + 7.2 * len(name)
    out.append("</svg>")
    return "\n".join(out)
