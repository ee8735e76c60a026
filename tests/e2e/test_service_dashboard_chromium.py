"""The FinOps dashboard served by the real app (``build_app``, what ``gpufleet serve`` runs) over a SQLite store
seeded through the API, in headless Debian chromium: each page loads without console errors and draws its charts,
the sign-in box takes an API token, and an app_team token sees only its own team. Saves
``out/service_dashboard_overview.png``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.web import PAGES
from tests.integration.conftest import _make_database
from tests.integration.finops_server import Seeded, seed

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
OUT = Path(__file__).resolve().parents[2] / "out"
CHARTS_DRAWN = """() => Object.values(Chart.instances).map(c => {
  const px = c.ctx.getImageData(0, 0, c.canvas.width, c.canvas.height).data;
  let painted = 0; for (let i = 3; i < px.length; i += 4) if (px[i] > 0) painted++;
  return {points: c.data.datasets.reduce((n, d) => n + d.data.length, 0), painted};
})"""

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian chromium not installed (apt-get install -y chromium)"
)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Seeded, str, str]]:
    gen = _make_database("sqlite", tmp_path_factory.mktemp("dash"), None)
    db = next(gen)
    sd = seed(db)
    admin = sd.server.token("finops_admin", "alice")
    team_a = sd.server.token("app_team", "ann", "team-a")
    yield sd, admin, team_a
    sd.server.stop()
    for _ in gen:  # drop the database
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    pw_api = pytest.importorskip("playwright.sync_api")
    if shutil.which(CHROMIUM) is None:
        pytest.skip("chromium not installed")
    with pw_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def _open(browser: Any, url: str, wait_ready: bool = True) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    if wait_ready:
        page.wait_for_selector("body[data-ready]", timeout=15_000)
    return page, errors


@pytest.mark.parametrize("name", list(PAGES))
def test_each_served_page_loads_and_draws_its_charts(seeded: tuple[Seeded, str, str], browser: Any, name: str) -> None:
    sd, admin, _ = seeded
    page, errors = _open(browser, f"{sd.server.base_url}/ui/{name}?token={admin}")
    try:
        charts = page.evaluate(CHARTS_DRAWN)
        assert charts, f"{name}: no chart"
        assert all(c["points"] > 0 and c["painted"] > 100 for c in charts), charts
        assert errors == []
        if name == "overview":
            OUT.mkdir(exist_ok=True)
            page.screenshot(path=str(OUT / "service_dashboard_overview.png"), full_page=True)
            assert (OUT / "service_dashboard_overview.png").stat().st_size > 10_000
    finally:
        page.close()


def test_sign_in_with_an_app_team_token_shows_only_that_team(seeded: tuple[Seeded, str, str], browser: Any) -> None:
    sd, _, team_a = seeded
    page, _ = _open(browser, f"{sd.server.base_url}/ui/breakdown?dim=team", wait_ready=False)
    try:
        page.wait_for_selector("#login:not([hidden])", timeout=15_000)  # no token: the data routes said 401
        page.fill("#token", team_a)
        page.click("#login-form button")
        # signing in reloads the page (location.search = ""): while the new document loads there is no #scope yet;
        # a function, not an expression: Playwright polls an expression with eval, which the pages' CSP refuses
        page.wait_for_function(
            "() => (document.getElementById('scope')?.textContent ?? '').includes('team-a')", timeout=15_000
        )
        keys = page.eval_on_selector_all("tbody tr td:first-child", "tds => tds.map(t => t.textContent)")
        assert keys == ["team-a"]
        html = page.content()
        assert "team-b" not in html and sd.wl_b not in html
    finally:
        page.close()
