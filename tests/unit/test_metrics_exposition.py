"""gpufleet's own /metrics: decisions, queue lengths and costs appear in the exposition text."""

from __future__ import annotations

from decimal import Decimal

from prometheus_client.parser import text_string_to_metric_families

from gpufleet.adapters.metrics import GpufleetMetrics
from gpufleet.cost.allocate import allocate_costs
from gpufleet.cost.budgets import AdmissionAction, AdmissionDecision
from gpufleet.cost.chargeback import chargeback
from gpufleet.cost.model import AllocationSpan, CapacityBlock, gpu_parts
from gpufleet.domain.money import price_to_uusd
from gpufleet.domain.pools import Tier


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_exposition_has_decisions_queues_and_costs() -> None:
    m = GpufleetMetrics()
    m.record_admissions(
        [AdmissionDecision("j1", AdmissionAction.QUEUE, None, "over_budget_queued", "b1", 10),
         AdmissionDecision("j2", AdmissionAction.ADMIT, "8x", "within_budget")]
    )  # fmt: skip
    m.set_queue_length("admission", 1)
    cap = [CapacityBlock("c", "p", Tier.ON_DEMAND, "h100_80gb", 2, 0, 3600, price_to_uusd(Decimal("6.88")))]
    allocs = [AllocationSpan("a", "w", "search", "t", "ns", "f", "p", "h100_80gb", gpu_parts(1), 0, 3600)]
    result = allocate_costs(cap, allocs, 0, 3600)
    m.record_cost(result, chargeback(result, allocs, "team"))
    body, ctype = m.render()
    assert ctype.startswith("text/plain")
    s = _samples(body.decode())
    assert s[("gpufleet_decisions_total", (("action", "queue"), ("reason", "over_budget_queued"),
                                           ("stage", "admission")))] == 1.0  # fmt: skip
    assert s[("gpufleet_queue_length", (("queue", "admission"),))] == 1.0
    assert s[("gpufleet_fleet_cost_usd", ())] == 13.76
    assert s[("gpufleet_idle_cost_usd", ())] == 6.88
    assert s[("gpufleet_cost_usd", (("kind", "direct"), ("team", "search"), ("tier", "on_demand")))] == 6.88
    assert s[("gpufleet_gpu_hours", (("state", "allocated"), ("team", "search")))] == 1.0


def test_two_registries_do_not_collide() -> None:
    a, b = GpufleetMetrics(), GpufleetMetrics()
    a.set_queue_length("q", 3)
    assert b"gpufleet_queue_length{" not in b.render()[0]
