"""`gpufleet simulate` as `make run` calls it writes a report that opens offline in headless Chromium with every
chart drawn: each chart has a real size on screen and marks (lines, areas, bars) with a real extent, and nothing
is fetched from the network. A screenshot is saved to out/report-screenshot.png."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUT = Path(__file__).resolve().parents[2] / "out"

# per chart: its title, its size on screen, and each drawn mark's extent (SVG user units)
CHART_PROBE = """
() => [...document.querySelectorAll('svg.chart')].map(svg => {
  const box = svg.getBoundingClientRect();
  const marks = [...svg.querySelectorAll('.series')].map(el => {
    const b = el.getBBox();
    const pts = el.tagName === 'polyline' ? el.points.numberOfItems : null;
    return {tag: el.tagName, x: b.x, w: b.width, h: b.height, pts};
  });
  const ticks = svg.querySelectorAll('text').length;
  return {title: svg.querySelector('title').textContent, w: box.width, h: box.height, marks, ticks};
})
"""


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (scripts/install-system-deps.sh)")
def test_the_make_run_report_draws_every_chart_offline_in_headless_chromium(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    page_path, json_path = tmp_path / "report.html", tmp_path / "summary.json"
    run = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "simulate", "--scenario", "default", "--days", "21",
         "--report", str(page_path), "--json", str(json_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    doc = json.loads(json_path.read_text())
    OUT.mkdir(exist_ok=True)
    shot = OUT / "report-screenshot.png"
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.as_uri())
            found = page.evaluate(CHART_PROBE)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    first = doc["loops"][doc["primary"]]["series"]
    assert len(found) == 4 + len(doc["loops"]) * len(first["sku_ids"]) + len(first["serving"])
    for c in found:
        assert c["w"] >= 900 and c["h"] >= 180, c["title"]  # large enough to read
        assert c["ticks"] >= 8, c["title"]  # title, legend and tick labels
        assert c["marks"], f"{c['title']}: nothing drawn"
        for m in c["marks"]:
            assert m["w"] > 0, f"{c['title']}: a {m['tag']} with no width"
            if m["tag"] == "polyline":
                assert m["pts"] >= 2, c["title"]
            else:
                assert m["h"] > 0, f"{c['title']}: a {m['tag']} with no height"
        span = max(m["x"] + m["w"] for m in c["marks"]) - min(m["x"] for m in c["marks"])
        assert span > 300, f"{c['title']}: marks span too little of the chart"
    assert errors == []
    assert all(u.startswith("file://") for u in requests), requests  # nothing from the network
    assert shot.stat().st_size > 50_000
