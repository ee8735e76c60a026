"""'What gpufleet changed': short sentences built from a loop's decision log (its reason codes), for people.

Reservation actions are told one by one ("day 12: reserved 96 H100 in us-east-1 ... because <reason>"); the
frequent decisions (launches, fallbacks, scale-downs, preemptions, moves, drains) are added up over the run. The
reason shown is the decision's own code (and, for reservations, its own words); nothing here invents a reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gpufleet.report.fmt import count, day, sku_label, usd

# what a reason code means, for the codes the shipped stages use (an unknown code is shown as it is)
REASON_TEXT = {
    "breakeven": "the break-even test on forecast demand",
    "forecast_led": "the forecast-led commitment test",
    "planned_run_reserve": "a registered planned run would push work past the pay-per-use tiers' ceilings",
    "serving_stockout_cover": (
        "serving must not depend on on-demand capacity that can stock out: reserved and secondary capacity cover "
        "most of last week's serving asks"
    ),
    "forecast_prewarm": "of the request-rate forecast one cold start ahead",
    "step_prewarm": "this time of day has seen large traffic steps, so replicas were held warm ahead of it",
    "burst_floor": "recent request bursts needed them",
    "queue_drain": "requests were queued",
    "scale_down_stabilized": "load stayed low for the scale-down window",
    "scale_to_zero": "no traffic: scaled to zero",
    "static_floor": "SLO misses: holding the static fleet the observed traffic needed",
    "placed_spot_cheapest": "spot was the cheapest tier that could take the work",
    "term_ended": "the term ended",
    "placed_on_demand": "queued work had no free capacity and on-demand was the first tier with room",
    "placed_spot": "queued work had no free capacity and spot was the first tier with room",
    "placed_secondary": "queued work had no free capacity and the secondary provider was the first with room",
    "unneeded_below_threshold": "idle and not needed by pending or forecast work",
    "idle_past_unneeded_time": "idle longer than the scale-down timeout",
    "preempt_lowest_loss": "higher-priority work was waiting and these victims lose the least work",
    "long_run_to_idle_reserved": "long runs on paid-by-the-hour nodes while reserved nodes sat idle",
    "drain_pays": "emptying part-used launched nodes saves more than the restarts cost",
    "no_proposal": "procurement saw no commitment worth buying",
    "dual_approval": "two distinct approvers approved it",
    "lookback_p50": "the lookback recommender commits to the median of recent demand",
    "quarterly_peak": "the quarterly review reserves for the forecast peak",
    "gang_lowest_loss": "a waiting gang needed whole nodes and emptying these loses the least work",
    "placed_spot_split": "spot had room for part of the work, which took it; the rest went to the next tier",
    "secondary_base": (
        "the secondary provider, cheaper than on demand, was in use enough over the last week to hold a base of its "
        "nodes"
    ),
    "start_buffer": "the fleet's training jobs were starting late against 95% within a minute, so nodes were kept free for them",
    "noise_floor": "of the noise floor (the replicas the traffic's recent noise needs at the SLO)",
    "step_hold": "of a traffic step due soon (replicas held warm)",
    "daily_peak_floor": "of the day's peak ask",
    "stockout_prewarm": "a traffic step is due while on-demand capacity is out of stock",
    "current_load": "of the current load",
    "queue_growth": "requests queued faster than the replicas drain them",
    "utilization": "of GPU utilization against the target (HPA's rule)",
    "utilization_sync": "of GPU utilization against the target, between two control periods (HPA's syncs)",
    "min_replicas": "of the fleet's minimum replica count",
    "clamped_min": "of the fleet's minimum replica count",
    "clamped_max": "of the fleet's maximum replica count",
    "budget_capped": "the fleet's daily budget capped it",
    "activate_held_requests": "requests were held while the fleet was at zero",
    "scale_up_stabilized": "load stayed high for the scale-up window",
    "panic": "of a burst (KPA's panic window)",
    "stable": "of the load over KPA's stable window",
    "static_peak_size": "the fleet is sized for its peak and left alone",
    "weekly_peak_review": "the weekly review sizes the fleet for last week's peak",
    "bumped_over_peak": "traffic ate into the peak headroom",
}
_COUNT = re.compile(r"^([\d,]+) ")
_VERBS = {
    "scale_up": "launched",
    "fallback": "fell back to a lower tier for",
    "scale_down": "terminated",
    "preempt": "preempted",
    "move": "moved",
    "drain": "drained",
    "held": "bought nothing at",
    "replicas_up": "added",
    "replicas_down": "removed",
}
RESERVATION_ACTIONS = ("bought", "ordered", "approved", "rejected", "expired")


def because(code: str, detail: str = "") -> str:
    """``because <what the code means> (<code>)``; a free-text reason longer than its code is quoted."""
    text = REASON_TEXT.get(code, code.replace("_", " "))
    extra = detail if detail and detail != code and not detail.startswith(f"{code}:") else ""
    if detail.startswith(f"{code}:"):
        extra = detail[len(code) + 1 :].strip()
    return f"because {text} ({code}{': ' + extra if extra else ''})"


def _where(d: dict[str, Any]) -> str:
    sku = sku_label(d.get("sku"))
    return f"{sku} in {d['region']}" if d.get("region") else sku


def reservation_sentence(d: dict[str, Any], outcome: str = "") -> str:
    """One reservation action; ``outcome`` (e.g. "approved on day 44.6") completes an order that needed
    two approvals."""
    g = count(d.get("gpus"))
    cost = f" ({usd(d['usd'])} over its term)" if d.get("usd") else ""
    when = day(d["day"])
    act = d["action"]
    if act == "bought":
        return f"{when}: reserved {g} {_where(d)}{cost} {because(d['reason'], d['detail'])}"
    if act == "ordered":
        needs = f"two approvals needed, {outcome}" if outcome else "two approvals needed"
        return f"{when}: ordered {g} {_where(d)}{cost} ({needs}) {because(d['reason'], d['detail'])}"
    if act == "approved":
        return f"{when}: the order for {g} {_where(d)} was approved by two approvers"
    if act == "rejected":
        return f"{when}: an approver rejected the order for {g} {_where(d)}"
    detail = d["detail"]
    if detail.startswith("term_ended; "):
        detail = detail[len("term_ended; ") :]
    return f"{when}: let {g} reserved {_where(d)} expire because the term ended ({d['reason']}); {detail}"


def _n(d: dict[str, Any]) -> int:
    m = _COUNT.match(str(d.get("detail", "")))
    return int(m.group(1).replace(",", "")) if m else 1


def aggregate(decisions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Frequent decisions added up over the run, per action, reason and SKU (largest GPU count first)."""
    acc: dict[tuple[str, str, str], dict[str, Any]] = {}
    for d in decisions:
        if d["stage"] == "procure" and d["action"] in RESERVATION_ACTIONS:
            continue
        key = (d["action"], d["reason"], d.get("sku") or "")
        a = acc.setdefault(
            key,
            {"action": d["action"], "reason": d["reason"], "sku": d.get("sku"), "n": 0, "gpus": 0, "days": []},
        )
        a["n"] += _n(d)
        a["gpus"] += d.get("gpus") or 0
        a["days"].append(d["day"])
        if "detail" not in a:
            a["detail"] = d["detail"].split(": ", 1)[1] if ": " in d["detail"] else d["detail"]
    return sorted(acc.values(), key=lambda a: (a["action"] == "held", -a["gpus"], -a["n"]))


def aggregate_sentence(a: dict[str, Any]) -> str:
    verb = _VERBS.get(a["action"], a["action"].replace("_", " "))
    sku = sku_label(a["sku"]) if a["sku"] else ""
    first, last = min(a["days"]), max(a["days"])
    span = f"on {day(first)}" if first == last else f"over days {first:.0f}-{last:.0f}"
    n = a["n"]
    what = {
        "scale_up": f"{count(n)} node{'s' * (n != 1)} ({count(a['gpus'])} {sku} GPUs)",
        "fallback": f"{count(n)} node{'s' * (n != 1)} ({count(a['gpus'])} {sku} GPUs)",
        "scale_down": f"{count(n)} idle node{'s' * (n != 1)} ({count(a['gpus'])} {sku} GPUs)",
        "drain": f"{count(n)} part-used {sku} node{'s' * (n != 1)}",
        "preempt": f"{count(n)} {sku} pod{'s' * (n != 1)} ({count(a['gpus'])} GPUs)",
        "move": f"{count(n)} {sku} run{'s' * (n != 1)} ({count(a['gpus'])} GPUs) onto idle reserved nodes",
        "held": f"{count(n)} {sku} procurement review{'s' * (n != 1)}",
        "replicas_up": f"{count(n)} serving replica{'s' * (n != 1)} ({count(a['gpus'])} {sku} GPUs)",
        "replicas_down": f"{count(n)} serving replica{'s' * (n != 1)} ({count(a['gpus'])} {sku} GPUs)",
    }.get(a["action"], f"{count(n)} ({count(a['gpus'])} {sku} GPUs)")
    return f"{verb} {what} {span} {because(a['reason'], a['detail'])}"


def _pick_reservations(res: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    """The reservation actions worth a sentence: the largest purchases, then the largest expiries and any
    rejection (at most ``most``), told in the order they happened; an approval is folded into its order."""
    buys = sorted((d for d in res if d["action"] in ("bought", "ordered")), key=lambda d: (-(d["gpus"] or 0), d["t_s"]))
    gone = sorted((d for d in res if d["action"] == "expired"), key=lambda d: (-(d["gpus"] or 0), d["t_s"]))
    nays = [d for d in res if d["action"] == "rejected"]
    n_gone = min(len(gone), max(1, most // 3))
    n_nays = min(len(nays), 1)
    picked = buys[: max(most - n_gone - n_nays, 0)] + gone[:n_gone] + nays[:n_nays]
    return sorted(picked[:most], key=lambda d: d["t_s"])


def _approval_of(order: dict[str, Any], res: list[dict[str, Any]]) -> str:
    for d in res:
        same = d.get("sku") == order.get("sku") and d.get("gpus") == order.get("gpus") and d["t_s"] >= order["t_s"]
        if same and d["action"] in ("approved", "rejected"):
            return f"{d['action']} on {day(d['day'])}"
    return ""


def reservation_summary(res: list[dict[str, Any]]) -> str | None:
    """One line over all reservation actions: GPUs bought, orders, expiries."""
    buys = [d for d in res if d["action"] in ("bought", "ordered")]
    gone = [d for d in res if d["action"] == "expired"]
    nays = [d for d in res if d["action"] == "rejected"]
    if not res:
        return None
    parts = []
    if buys:
        parts.append(
            f"committed to {count(sum(d['gpus'] or 0 for d in buys))} GPUs in {count(len(buys))} "
            f"order{'s' * (len(buys) != 1)} ({usd(sum(d['usd'] or 0 for d in buys))} over their terms)"
        )
    if nays:
        parts.append(f"{count(len(nays))} order{'s' * (len(nays) != 1)} rejected by an approver")
    if gone:
        parts.append(
            f"let {count(sum(d['gpus'] or 0 for d in gone))} reserved GPUs expire ({count(len(gone))} term{'s' * (len(gone) != 1)})"
        )
    return "reservations: " + "; ".join(parts)


def what_changed(doc: dict[str, Any], loop: str | None = None, most: int = 12) -> list[str]:
    """At most ``most`` sentences on what ``loop`` (default: the primary) decided: reservations first (a summary
    line, then the largest actions), then the frequent decisions added up over the run."""
    name = loop or doc["primary"]
    decisions = doc["loops"][name].get("decisions") or []
    res = [d for d in decisions if d["stage"] == "procure" and d["action"] in RESERVATION_ACTIONS]
    head = reservation_summary(res)
    out = [head] if head else ["reserved nothing during the run"]
    for d in _pick_reservations(res, max(most // 2 - 1, 1)):
        out.append(reservation_sentence(d, _approval_of(d, res) if d["action"] == "ordered" else ""))
    out += [aggregate_sentence(a) for a in aggregate(decisions)[: max(most - len(out), 0)]]
    return out


def contrast(doc: dict[str, Any]) -> list[str]:
    """One line per other loop: what it did differently in reservations and launches, from its own figures."""
    p = doc["primary"]
    mine = doc["loops"][p]
    out = []
    for name, s in doc["loops"].items():
        if name == p:
            continue
        out.append(
            f"{name}: reserved {count(s['reservations']['gpus_bought'])} GPUs ({p} "
            f"{count(mine['reservations']['gpus_bought'])}), launched {count(s['node_launches'])} nodes "
            f"({p} {count(mine['node_launches'])}), idle cost {usd(s['idle_cost_usd'])} "
            f"({p} {usd(mine['idle_cost_usd'])})"
        )
    return out
