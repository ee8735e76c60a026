"""The terminal report of a comparison (Rich): the figures per loop and the bound, then what the primary changed."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpufleet.report.changes import contrast, what_changed
from gpufleet.report.figures import BOUND, BOUND_NOTE, loop_names, table

CLIP = 220  # characters of a sentence in the terminal (the HTML report and the JSON keep every word)


def clip(text: str, most: int = CLIP) -> str:
    return text if len(text) <= most else text[: most - 3].rstrip() + "..."


def print_report(doc: dict[str, Any], console: Console, *, most: int = 10) -> None:
    names = loop_names(doc)
    header, body = table(doc)
    t = Table(
        title=escape(
            f"{', '.join(names)} on the same world: {doc['scenario']}, {doc['days']} days, seed {doc['seed']}"
        ),
        title_justify="left",
    )
    for i, h in enumerate(header):
        style = "italic" if doc.get("hindsight_bound") and i == len(header) - 1 else None
        t.add_column(h, justify="left" if i == 0 else "right", style=style)
    for line in body:
        bold = line[0] in ("total cost",) or line[0].startswith("cost /")
        t.add_row(*[f"[bold]{escape(c)}[/]" if bold else escape(c) for c in line])
    console.print(t)
    if doc.get("hindsight_bound"):
        console.print(f"[dim]{BOUND}: {BOUND_NOTE}.[/]")
    else:
        console.print("[dim]no hindsight bound in this run: ratios to it are n/a.[/]")
    p = doc["primary"]
    console.print(f"\n[bold]What {escape(p)} changed[/] (from its decisions' reason codes)")
    for sentence in what_changed(doc, most=most):
        console.print(f"  - {escape(clip(sentence))}")
    for other in contrast(doc):
        console.print(f"  [dim]{escape(other)}[/]")
    off = [n for n, s in doc["loops"].items() if not s.get("cost_conserved", True)]
    if off:
        console.print(f"[bold red]cost NOT conserved (allocated + idle != fleet) for: {', '.join(off)}[/]")
