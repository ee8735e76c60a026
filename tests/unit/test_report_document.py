"""The comparison document (gpufleet.comparison/1) and the faces that show it: keys as contracted, the bound
labelled as a bound, ratios from the figures, JSON without NaN, numbers for people."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpufleet.cli.cmd_simulate import write_json
from gpufleet.report.changes import REASON_TEXT, what_changed
from gpufleet.report.html import charts, render_html
from gpufleet.report.summary import print_report
from gpufleet.sim.builtin import default_scenario
from gpufleet.sim.compare import SCHEMA, comparison_document, run_loops

CONTRACT_KEYS = {"schema", "scenario", "seed", "days", "primary", "loops", "ratios"}
DECISION_KEYS = {"t_s", "day", "stage", "action", "reason", "sku", "region", "gpus", "usd", "detail"}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    sc = default_scenario(gpus=64, days=9, seed=2)
    return run_loops(sc, sc.seed)


def _with_bound(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as it will look once the bound lands (scen16): a made-up bound below every loop."""
    sc = default_scenario(gpus=64, days=9, seed=2)
    low = min(s["total_cost_usd"] for s in doc["loops"].values()) * 0.8
    bound = {
        "label": "hindsight bound: lower bound on the cost of the realized demand, not a policy",
        "total_cost_usd": low,
        "cost_by_tier_usd": {"reserved": low * 0.75, "on_demand": low * 0.25, "spot": 0.0, "secondary": 0.0},
        "method": "test stand-in",
    }
    return comparison_document(sc, doc["seed"], copy.deepcopy(doc["loops"]), bound)


def test_the_document_has_the_contracted_keys_and_every_loop_in_full(doc: dict[str, Any]) -> None:
    assert set(doc) - {"hindsight_bound"} == CONTRACT_KEYS and doc["schema"] == SCHEMA
    bound = doc.get("hindsight_bound", {}).get("total_cost_usd")
    assert doc["primary"] == "gpufleet" and doc["days"] == 9 and doc["seed"] == 2
    for name, s in doc["loops"].items():
        assert s["policy"] == name and {"total_cost_usd", "series", "decisions", "node_launches"} <= set(s)
        assert all(set(d) == DECISION_KEYS for d in s["decisions"])
        to_bound = doc["ratios"][name]["to_bound"]
        assert to_bound is None if bound is None else to_bound == pytest.approx(s["total_cost_usd"] / bound, abs=1e-4)
        assert doc["ratios"][name]["to_baseline"] == pytest.approx(
            s["total_cost_usd"] / doc["loops"]["baseline"]["total_cost_usd"], abs=1e-4
        )


def test_the_bound_is_labelled_as_a_bound_and_each_loop_has_its_ratio_to_it(doc: dict[str, Any]) -> None:
    d = _with_bound(doc)
    assert set(d) == CONTRACT_KEYS | {"hindsight_bound"}
    for name, s in d["loops"].items():
        assert d["ratios"][name]["to_bound"] == pytest.approx(
            s["total_cost_usd"] / (d["hindsight_bound"]["total_cost_usd"]), abs=1e-4
        )
    html = render_html(d)
    assert "hindsight bound (not a policy)" in html  # its bar in the cost chart
    assert "a lower bound on the cost of the realized demand, not a policy" in html
    assert "cost / hindsight bound" in html
    console = Console(record=True, width=220)
    print_report(d, console)
    text = console.export_text()
    assert "hindsight bound" in text and "not a policy" in text
    ratio = f"{d['ratios']['gpufleet']['to_bound']:.3f}x"
    assert ratio in text and ratio in html


def test_json_stays_json_even_with_a_nan_in_the_figures(doc: dict[str, Any], tmp_path: Path) -> None:
    d = copy.deepcopy(doc)
    d["loops"]["gpufleet"]["forecast_wape"]["x"] = float("nan")
    d["ratios"]["gpufleet"]["to_bound"] = float("inf")
    p = tmp_path / "summary.json"
    write_json(p, d)

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON")

    back = json.loads(p.read_text(), parse_constant=refuse)
    assert back["loops"]["gpufleet"]["forecast_wape"]["x"] is None and back["ratios"]["gpufleet"]["to_bound"] is None


def test_numbers_read_like_numbers_for_people(doc: dict[str, Any]) -> None:
    html = render_html(_with_bound(doc))
    text = re.sub(r"<[^>]+>", " ", html)
    assert not re.search(r"\d\.\d+e[+-]\d", text), "scientific notation in the report"
    assert "$" in text and "%" in text
    assert re.search(r"\$\d+(\.\d+)?[kM]\b", text)  # money as $4.41M / $312k
    assert "day of the simulation" in text and "hour" not in re.sub(r"GPU-hours?", "", text).lower()


def test_one_chart_per_idea_and_every_chart_has_axes_and_a_legend(doc: dict[str, Any]) -> None:
    cs = charts(_with_bound(doc))
    names = len(doc["loops"])
    first = doc["loops"]["gpufleet"]["series"]
    expected = 4 + names * len(first["sku_ids"]) + len(first["serving"])
    assert len(cs) == expected
    for _section, svg in cs:
        assert svg.count('class="series"') >= 1
        assert "<title>" in svg
        assert svg.count("<text") >= 8  # title, legend, tick labels and the axis label


def test_what_changed_comes_from_reason_codes(doc: dict[str, Any]) -> None:
    lines = what_changed(doc)
    assert lines
    codes = {d["reason"] for d in doc["loops"]["gpufleet"]["decisions"]}
    for line in lines:
        if line.startswith(("reserved nothing", "reservations: ")):
            continue
        assert any(f"({c}" in line for c in codes), line


def test_every_reason_code_the_loops_log_reads_as_words(doc: dict[str, Any]) -> None:
    """No sentence of 'what changed' falls back to the bare code ("because noise floor (noise_floor)")."""
    for name, loop in doc["loops"].items():
        codes = {d["reason"] for d in loop["decisions"]}
        assert codes, name
        assert codes <= set(REASON_TEXT), (name, sorted(codes - set(REASON_TEXT)))


def _d(day_: float, action: str, gpus: int, reason: str = "forecast_led", sku: str = "h100_80gb") -> dict[str, Any]:
    return {
        "t_s": int(day_ * 86400),
        "day": day_,
        "stage": "procure",
        "action": action,
        "reason": reason,
        "sku": sku,
        "region": "us-east-1",
        "gpus": gpus,
        "usd": gpus * 1000.0,
        "detail": f"{reason}: test",
    }


def test_reservation_sentences_tell_the_largest_actions_in_order_with_a_summary_first() -> None:
    ds = [_d(7 * i, "bought", 8 * i) for i in range(1, 11)]
    ds += [_d(40, "ordered", 144), _d(42.5, "approved", 144, "dual_approval"), _d(45.6, "expired", 64, "term_ended")]
    ds += [_d(50, "expired", 16, "term_ended", "l40s"), _d(60, "ordered", 96), _d(61, "rejected", 96, "rejected")]
    doc = {"primary": "gpufleet", "loops": {"gpufleet": {"decisions": sorted(ds, key=lambda d: d["t_s"])}}}
    lines = what_changed(doc, most=12)
    assert lines[0] == (
        "reservations: committed to 680 GPUs in 12 orders ($680k over their terms); 1 order rejected by an "
        "approver; let 80 reserved GPUs expire (2 terms)"
    )
    told = lines[1:6]
    assert len(told) == 5
    assert told[0].startswith(
        "day 40: ordered 144 H100 in us-east-1 ($144k over its term) (two approvals needed, approved on day 42.5)"
    )
    assert any(x.startswith("day 45.6: let 64 reserved H100 in us-east-1 expire because the term ended") for x in told)
    assert any(x.startswith("day 61: an approver rejected the order for 96 H100") for x in told)
    days = [float(x.split(":")[0].removeprefix("day ")) for x in told]
    assert days == sorted(days)
