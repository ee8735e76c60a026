"""The HTML report opens offline in headless Chromium and shows its charts (a screenshot is saved)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpufleet.report.html import write_html_report
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.run import simulate

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


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (scripts/install-system-deps.sh)")
def test_report_renders_its_charts_offline_in_headless_chromium(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    _, result = simulate(default_scenario(gpus=128, days=4))
    page_path = tmp_path / "report.html"
    write_html_report(result, page_path)
    OUT.mkdir(exist_ok=True)
    shot = OUT / "report-screenshot.png"
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.as_uri())
            charts = page.locator("svg.chart")
            n = charts.count()
            assert n >= 5
            # every chart has drawn series with a real size on screen
            for i in range(n):
                box = charts.nth(i).bounding_box()
                assert box is not None and box["width"] > 300 and box["height"] > 150
                assert charts.nth(i).locator(".series").count() >= 1
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert all(u.startswith("file://") for u in requests), requests  # nothing from the network
    assert shot.stat().st_size > 10_000
