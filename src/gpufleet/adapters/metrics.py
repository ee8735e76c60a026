"""gpufleet's own Prometheus metrics: decisions made, queue lengths, costs, idle findings, budgets.

Nothing is registered at import time: :class:`GpufleetMetrics` owns its ``CollectorRegistry`` (one per process,
built at bootstrap; tests build their own). :meth:`GpufleetMetrics.render` returns the exposition text and its
content type for a ``/metrics`` route.

Metric names (units in names, Prometheus conventions):
  gpufleet_decisions_total{stage,action,reason}   counter  every decision a stage returned
  gpufleet_queue_length{queue}                    gauge    work waiting (admission, placement, ...)
  gpufleet_cost_usd{team,tier,kind}               gauge    cost of the last metered window, by line kind
  gpufleet_fleet_cost_usd / gpufleet_idle_cost_usd gauge   the last window's fleet and idle cost
  gpufleet_gpu_hours{team,state}                  gauge    allocated / used GPU-hours in the last window
  gpufleet_idle_findings{action}                  gauge    idle-allocated GPUs found, by recommended action
  gpufleet_budget_used_ratio{budget}              gauge    spent / limit per budget
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from gpufleet.cost.allocate import CostAllocation
from gpufleet.cost.budgets import AdmissionDecision, BudgetStatus
from gpufleet.cost.chargeback import ChargebackReport
from gpufleet.cost.idle import IdleAction, IdleFinding
from gpufleet.domain.money import units_to_usd


class GpufleetMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "gpufleet_decisions",
            "Decisions returned by a control-loop stage",
            ["stage", "action", "reason"],
            registry=r,
        )
        self.queue_length = Gauge("gpufleet_queue_length", "Work items waiting in a queue", ["queue"], registry=r)
        self.cost_usd = Gauge(
            "gpufleet_cost_usd", "Cost of the last metered window", ["team", "tier", "kind"], registry=r
        )
        self.fleet_cost_usd = Gauge("gpufleet_fleet_cost_usd", "Fleet cost of the last metered window", registry=r)
        self.idle_cost_usd = Gauge("gpufleet_idle_cost_usd", "Idle capacity cost of the last window", registry=r)
        self.gpu_hours = Gauge("gpufleet_gpu_hours", "GPU-hours in the last window", ["team", "state"], registry=r)
        self.idle_findings = Gauge("gpufleet_idle_findings", "Idle-allocated GPU findings", ["action"], registry=r)
        self.budget_used_ratio = Gauge("gpufleet_budget_used_ratio", "Spent over limit", ["budget"], registry=r)

    def record_decision(self, stage: str, action: str, reason: str) -> None:
        self.decisions.labels(stage, action, reason).inc()

    def record_admissions(self, decisions: Iterable[AdmissionDecision]) -> None:
        for d in decisions:
            self.record_decision("admission", d.action.value, d.reason)

    def set_queue_length(self, queue: str, length: int) -> None:
        self.queue_length.labels(queue).set(length)

    def record_cost(self, result: CostAllocation, by_team: ChargebackReport | None = None) -> None:
        """Replace the cost gauges with the window in ``result`` (and GPU-hours from a team report)."""
        self.cost_usd.clear()
        sums: dict[tuple[str, str, str], int] = defaultdict(int)
        for ln in result.lines:
            sums[(ln.team_id, ln.tier, ln.kind.value)] += ln.units
        for (team, tier, kind), units in sums.items():
            self.cost_usd.labels(team, tier, kind).set(float(units_to_usd(units)))
        self.fleet_cost_usd.set(float(units_to_usd(result.fleet_units)))
        self.idle_cost_usd.set(float(units_to_usd(result.idle_units)))
        if by_team is not None:
            self.gpu_hours.clear()
            for row in by_team.rows:
                self.gpu_hours.labels(row.key, "allocated").set(row.allocated_gpu_h)
                self.gpu_hours.labels(row.key, "used").set(row.used_gpu_h)

    def record_idle(self, findings: Sequence[IdleFinding]) -> None:
        for action in IdleAction:
            self.idle_findings.labels(action.value).set(sum(1 for f in findings if f.action is action))
        for f in findings:
            self.record_decision("idle", f.action.value, f.reason)

    def record_budgets(self, statuses: Iterable[BudgetStatus]) -> None:
        for s in statuses:
            self.budget_used_ratio.labels(s.budget.id).set(s.fraction)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type, for a ``/metrics`` route."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
