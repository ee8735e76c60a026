"""The FinOps dashboard in headless Chromium: every page loads without console errors, charts render, nothing
is fetched from outside the server (the chart library is bundled), and an app team sees only its own team.

Needs Debian ``chromium`` (driven by Playwright with ``executable_path``); skipped with the reason when absent.
A screenshot of the overview is saved to ``out/dashboard_overview.png``.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from fastapi import FastAPI, Header, HTTPException

from gpufleet.web import PAGES, Scope, mount_dashboard
from gpufleet.web.demo import demo_data

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
TOKENS = {"admin-token": Scope(None), "team3-token": Scope("team-3")}
OUT = Path(__file__).resolve().parents[2] / "out"

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian chromium not installed (apt-get install -y chromium)"
)


def bearer_scope(authorization: Annotated[str | None, Header()] = None) -> Scope:
    """The test's stand-in for the API's token auth: same header, same answer shape."""
    token = (authorization or "").removeprefix("Bearer ").strip()
    if token not in TOKENS:
        raise HTTPException(401, detail="missing or unknown token", headers={"WWW-Authenticate": "Bearer"})
    return TOKENS[token]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    import uvicorn

    app = FastAPI()
    mount_dashboard(app, demo_data(), viewer=bearer_scope)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    srv = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none", lifespan="off")
    )
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    th.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    pw_api = pytest.importorskip("playwright.sync_api")
    if shutil.which(CHROMIUM) is None:
        pytest.skip("chromium not installed")
    with pw_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def _open(browser: Any, url: str) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url)
    page.wait_for_selector("body[data-ready]", timeout=15_000)
    return page, errors, requests


CHARTS_DRAWN = """() => Object.values(Chart.instances).map(c => {
  const px = c.ctx.getImageData(0, 0, c.canvas.width, c.canvas.height).data;
  let painted = 0; for (let i = 3; i < px.length; i += 4) if (px[i] > 0) painted++;
  return {points: c.data.datasets.reduce((n, d) => n + d.data.length, 0), painted};
})"""


@pytest.mark.parametrize("name", list(PAGES))
def test_each_page_loads_without_console_errors_and_draws_its_charts(server: str, browser: Any, name: str) -> None:
    page, errors, requests = _open(browser, f"{server}/ui/{name}?token=admin-token")
    try:
        assert page.evaluate("document.body.dataset.ready") == "1"
        charts = page.evaluate(CHARTS_DRAWN)
        assert charts, f"{name}: no chart"
        assert all(c["points"] > 0 and c["painted"] > 100 for c in charts), charts
        assert errors == []
        assert all(u.startswith(server) or u.startswith("data:") or u.startswith("blob:") for u in requests), requests
        if name == "overview":
            OUT.mkdir(exist_ok=True)
            page.screenshot(path=str(OUT / "dashboard_overview.png"), full_page=True)
            assert (OUT / "dashboard_overview.png").stat().st_size > 10_000
    finally:
        page.close()


def test_an_app_team_sees_only_its_own_team_in_the_dashboard(server: str, browser: Any) -> None:
    page, errors, _ = _open(browser, f"{server}/ui/breakdown?dim=team&token=team3-token")
    try:
        page.wait_for_function("() => document.getElementById('scope').textContent.includes('team-3')")
        keys = page.eval_on_selector_all("tbody tr td:first-child", "tds => tds.map(t => t.textContent)")
        assert keys == ["team-3"]
        assert "token" not in page.url and "dim=team" in page.url  # the token left the address bar
        assert errors == []
    finally:
        page.close()


def test_the_data_routes_enforce_the_viewer_scope(server: str) -> None:
    assert httpx.get(f"{server}/ui/api/overview").status_code == 401
    team = {"Authorization": "Bearer team3-token"}
    rows = httpx.get(f"{server}/ui/api/breakdown", params={"dim": "tenant"}, headers=team).json()["rows"]
    assert rows and all(r["key"].startswith("tenant-3-") for r in rows)
    opp = httpx.get(f"{server}/ui/api/opportunities", headers=team).json()
    assert all(r["team"] == "team-3" for r in opp["idle"] + opp["rightsizing"])
    csv_text = httpx.get(f"{server}/ui/api/breakdown.csv", params={"dim": "team"}, headers=team).text
    assert [ln.split(",")[0] for ln in csv_text.strip().splitlines()] == ["team", "team-3", "TOTAL"]
    admin = httpx.get(f"{server}/ui/api/breakdown", params={"dim": "team"},
                      headers={"Authorization": "Bearer admin-token"}).json()["rows"]  # fmt: skip
    assert len({r["key"] for r in admin}) > 10
    assert httpx.get(f"{server}/ui/api/breakdown", params={"dim": "nope"}, headers=team).status_code == 422
