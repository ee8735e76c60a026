"""Review of what the FinOps dashboard's pages show and allow in headless Chromium (web/static/app.js,
web/dashboard.py): the chart labels of pools and reservations, and what a script injected into a page could do.

The pages are drawn from a :class:`CostDashboardData` over real books (``allocate_costs`` of two reserved pools of one
SKU in two regions, a reservation bought ahead and hostile team, tenant, feature, namespace and workload names), and,
for the headers, from the served app (``build_app`` over a store seeded through the API).
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI

from gpufleet.control.metering import FinOpsSnapshot
from gpufleet.cost.allocate import allocate_costs
from gpufleet.cost.meter import UsageTotals
from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, CapacityBlock, DistributionRule
from gpufleet.domain.pools import Tier
from gpufleet.web import PAGES, CostDashboardData, mount_dashboard
from tests.integration.conftest import _make_database
from tests.integration.finops_server import Seeded, seed

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
DAY = 86_400
T0 = 1_766_620_800  # 2025-12-25T00:00:00Z
T1 = T0 + 7 * DAY
EAST = "aws/us-east-1/h100_80gb/reserved"
WEST = "aws/us-west-2/h100_80gb/reserved"
EVIL = '<img src=x onerror="window.__pwned=1">'

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian chromium not installed (apt-get install -y chromium)"
)


def _books() -> CostDashboardData:
    """8 reserved H100s in us-east-1 (half held by a team with hostile names), 8 idle in us-west-2, and 8 more in
    us-west-2 bought ahead (their term starts a month after the window)."""
    cap = [
        CapacityBlock("res-east", EAST, Tier.RESERVED, "h100_80gb", 8, T0 - DAY, T0 + 90 * DAY, 2_000_000, EVIL),
        CapacityBlock("res-west", WEST, Tier.RESERVED, "h100_80gb", 8, T0 - DAY, T0 + 90 * DAY, 2_000_000, EVIL),
        CapacityBlock("res-ahead", WEST, Tier.RESERVED, "h100_80gb", 8, T1 + 30 * DAY, T1 + 120 * DAY, 2_000_000, EVIL),
    ]
    allocs = [AllocationSpan("a1", EVIL, EVIL, EVIL, EVIL, EVIL, EAST, "h100_80gb", 4 * PARTS_PER_GPU, T0, T1)]
    res = allocate_costs(cap, allocs, T0, T1, idle_rule=DistributionRule.SEPARATE_LINE,
                         shared_rule=DistributionRule.PROPORTIONAL)  # fmt: skip
    n = np.zeros(1)
    usage = UsageTotals(np.zeros(1, dtype=np.int64), n.copy(), n.copy(), n.copy())
    return CostDashboardData(FinOpsSnapshot(res, allocs, usage, T1, cap, {}, {}, [], []))


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    import uvicorn

    app = FastAPI()
    mount_dashboard(app, _books())  # the default viewer: the fleet scope
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
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Seeded, str]]:
    gen = _make_database("sqlite", tmp_path_factory.mktemp("webcsp"), None)
    sd = seed(next(gen))
    yield sd, sd.server.token("finops_admin", "alice")
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


def _open(browser: Any, url: str) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector("body[data-ready]", timeout=15_000)
    return page, errors


def test_two_pools_of_one_sku_and_tier_in_two_regions_get_two_labels(server: str, browser: Any) -> None:
    """Review (fixed), the defect: the overview's "Unallocated capacity by pool" chart labelled each pool with the last
    two parts of its id (app.js, ``r.pool.split("/").slice(-2)``), and the service names pools
    ``provider/region/sku/tier``: the reserved H100 pools of us-east-1 and us-west-2 were two bars both labelled
    ``h100_80gb/reserved``, so the reader could not tell which region's capacity sat idle. Each bar now carries the
    pool's whole id."""
    page, errors = _open(browser, f"{server}/ui/overview")
    try:
        labels = page.evaluate("Chart.getChart('idle-by-pool').data.labels")
        assert len(labels) == 2 and len(set(labels)) == 2, labels
        assert any("us-east-1" in x for x in labels) and any("us-west-2" in x for x in labels), labels
        assert errors == []
    finally:
        page.close()


def test_a_reservation_bought_ahead_is_not_drawn_as_unused(server: str, browser: Any) -> None:
    """Review (fixed), the defect: the reservations page drew a reservation whose term starts after the window (its
    utilization is null in the JSON and "–" in the table) as a 0 % bar (app.js, ``100 * r.utilization`` with
    ``null``), i.e. as a reservation paid for and entirely unused. A null utilization is now no bar."""
    page, errors = _open(browser, f"{server}/ui/reservations")
    try:
        chart = page.evaluate(
            "(() => { const c = Chart.getChart('reservation-util'); return [c.data.labels, c.data.datasets[0].data]; })()"
        )
        bars = dict(zip(*chart, strict=True))
        assert bars["res-ahead"] is None, bars
        assert bars["res-east"] == pytest.approx(50.0) and bars["res-west"] == 0, bars
        cells = page.eval_on_selector_all("tbody tr", "trs => trs.map(tr => [...tr.cells].map(td => td.textContent))")
        assert next(c for c in cells if c[0] == "res-ahead")[:4] == ["res-ahead", WEST, "8", EVIL], cells
        assert errors == []
    finally:
        page.close()


@pytest.mark.parametrize("name", list(PAGES))
def test_hostile_names_are_shown_as_text_on_every_page(server: str, browser: Any, name: str) -> None:
    """Review (holds): a team, tenant, namespace, feature, workload and reservation owner named like markup is shown as
    text (the pages build the DOM with ``textContent``; Chart.js draws labels on a canvas), never run."""
    dim = "?dim=feature" if name == "breakdown" else ""
    page, errors = _open(browser, f"{server}/ui/{name}{dim}")
    try:
        assert page.evaluate("document.body.dataset.ready") == "1"
        page.wait_for_timeout(200)  # an injected <img src=x> would have fired its onerror by now
        assert page.evaluate("window.__pwned") is None
        if name in ("breakdown", "reservations"):
            assert EVIL in page.eval_on_selector_all("td", "tds => tds.map(t => t.textContent)")
        assert page.query_selector("#content img") is None
        assert errors == []
    finally:
        page.close()


def test_markup_injected_into_a_served_page_cannot_run_script(served: tuple[Seeded, str], browser: Any) -> None:
    """Review (fixed), the defect: the served app's Content-Security-Policy on the dashboard pages (api/hardening.py,
    ``frame-ancestors 'none'; object-src 'none'; base-uri 'none'``) has no ``script-src`` nor ``default-src``, so any
    markup that reaches a page (a future ``innerHTML``, a library's tooltip) runs inline script and can read the API
    token from ``sessionStorage``, though the pages need only their own two script files. The pages now send a policy
    that allows only the server's own scripts (web/dashboard.py, ``PAGE_CSP``)."""
    sd, admin = served
    page, _ = _open(browser, f"{sd.server.base_url}/ui/overview?token={admin}")
    try:
        page.evaluate(
            """() => document.getElementById('content').insertAdjacentHTML('beforeend',
                 '<img id=evil src=data:, onerror="window.__pwned = sessionStorage.getItem(\\'gpufleet_token\\')">')"""
        )
        page.wait_for_timeout(300)
        assert page.evaluate("window.__pwned") is None
    finally:
        page.close()
