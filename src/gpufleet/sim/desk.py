"""Reservations in the simulated world: initial commitments, procurement, approval, activation, expiry.

A part of :class:`~gpufleet.sim.world.World`; every status change goes through the domain's one transition gate.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.domain.pools import Tier
from gpufleet.domain.reservations import Reservation, ReservationStatus, term_seconds
from gpufleet.ports import DemandForecast, PlannedRunRegistration, ProcurementContext
from gpufleet.sim.kinds import DAILY, DAY_S, HOUR_S, RES_EVENT
from gpufleet.sim.lifecycle import NodeState

if TYPE_CHECKING:
    from gpufleet.control.loop import ControlLoop
    from gpufleet.sim.decisions import DecisionLog
    from gpufleet.sim.engine import EventQueue
    from gpufleet.sim.fleet import Fleet
    from gpufleet.sim.forecasts import ForecastBook
    from gpufleet.sim.metrics import Metrics
    from gpufleet.sim.nodes import NodeEvents
    from gpufleet.sim.pods import Billing
    from gpufleet.sim.scenario import ControlSpec, PlannedRun, PoolSpec
    from gpufleet.sim.scheduling import Scheduling


# a commitment that holds or will hold capacity: counted as committed
LIVE = (
    ReservationStatus.PENDING_APPROVAL,
    ReservationStatus.APPROVED,
    ReservationStatus.SUBMITTED,
    ReservationStatus.ACTIVE,
)


def registrations(runs: list[PlannedRun]) -> tuple[PlannedRunRegistration, ...]:
    """The scenario's planned runs as their teams registered them: what a user types (name, team, SKU, GPUs,
    start, duration, probability), never the world's draw of whether a run happens (sim/demand.planned). A
    scenario's calendar is known from day 0."""
    return tuple(
        PlannedRunRegistration(
            name=r.name,
            team=r.team,
            sku_id=r.sku,
            gpus=r.gpus,
            start_s=int(r.start_day * DAY_S),
            duration_s=int(r.duration_days * DAY_S),
            probability=r.probability,
            registered_s=0,
        )
        for r in runs
    )


class ReservationDesk:
    """The world's reservation book: commitments from the scenario, the forecast period's procurement and approval
    (decided by the loop), activation after the lead time (the reserved nodes join the fleet) and expiry."""

    def __init__(
        self,
        *,
        fleet: Fleet,
        q: EventQueue,
        loop: ControlLoop,
        forecasts: ForecastBook,
        billing: Billing,
        scheduling: Scheduling,
        node_events: NodeEvents,
        metrics: Metrics,
        decisions: DecisionLog,
        control: ControlSpec,
        sku_ids: list[str],
        per_node: list[int],
        pool_specs: dict[int, PoolSpec],
        horizon_s: int,
        planned_runs: tuple[PlannedRunRegistration, ...] = (),
    ) -> None:
        self.fleet = fleet
        self.q = q
        self.loop = loop
        self.forecasts = forecasts
        self.billing = billing
        self.scheduling = scheduling
        self.node_events = node_events
        self.metrics = metrics
        self.decisions = decisions
        self.procurement_period_days = control.procurement_period_days
        self.approval_threshold_usd = Decimal(str(control.approval_threshold_usd))
        self.sku_ids = sku_ids
        self.per_node = per_node
        self.pool_specs = pool_specs
        self.horizon_s = horizon_s
        self.planned_runs = planned_runs  # the calendar users registered (not whether the runs happen)
        self.reservations: list[Reservation] = []
        self.res_nodes: list[list[int]] = []  # per reservation: its nodes
        self.res_pool: list[int] = []  # per reservation: its pool index
        self.approvals_pending: dict[int, tuple[bool, str]] = {}  # reservation -> (approved, approvers)
        # SKUs whose order an approver rejected: reviewed again at the next daily pass when the loop's procurer asks
        # for it (``retry_rejected``; control/procurement.py), not only at the next procurement period
        self.retry_skus: set[int] = set()

    def initial_reservations(self) -> None:
        for s, spec in self.pool_specs.items():
            pidx = self.fleet.pool_of(s, Tier.RESERVED)
            for r in spec.reservations:
                term = 36 if r.remaining_months > 12 else 12
                end_s = int(r.remaining_months * 730 * HOUR_S)
                res = self._new_reservation(pidx, r.gpus, end_s - term_seconds(term), term)
                for st in (ReservationStatus.APPROVED, ReservationStatus.SUBMITTED):
                    res.transition(st, at_s=0, actor="initial", reason="existing commitment")
                self._activate(len(self.reservations) - 1)

    def _new_reservation(self, pool_idx: int, units: int, start_s: int, term_months: int) -> Reservation:
        pool = self.fleet.pools[pool_idx].pool
        res = Reservation(
            f"res_{len(self.reservations):05d}",
            pool.id,
            pool.sku_id,
            units,
            start_s,
            term_months,
            pool.price_usd_per_gpu_h,
        )
        self.reservations.append(res)
        self.res_nodes.append([])
        self.res_pool.append(pool_idx)
        return res

    def on_daily(self, now: int, _a: int, _b: int) -> None:
        """Every forecast period: score the last forecast against measured demand, forecast the next period
        (hourly grid), then let procurement decide with that forecast in hand."""
        day = now // DAY_S
        hour = now // HOUR_S
        period_d = self.procurement_period_days
        if day % period_d == 0:
            self.retry_skus.clear()  # the review below asks again anyway
            for s in range(len(self.sku_ids)):
                hist = self.metrics.demand_history(s, hour)
                fc = self.forecasts.score_and_issue(s, hist, hour, period_d * 24)
                if day > 0:
                    seen = hist if self.loop.procure_on_pending else self.metrics.in_use_history(s, hour)
                    self._procure(s, now, seen, fc)
        elif self.retry_skus:
            # a review whose order was rejected, asked again with today's observations (the forecast issued at the
            # last period stands; the forecast-led procurer does not read it)
            for s in sorted(self.retry_skus):
                pending = self.loop.procure_on_pending
                seen = self.metrics.demand_history(s, hour) if pending else self.metrics.in_use_history(s, hour)
                self._procure(s, now, seen, None, retry=True)
            self.retry_skus.clear()
        if now + DAY_S <= self.horizon_s:
            self.q.schedule(now + DAY_S, DAILY, priority=0)

    def _committed_at(self, s: int, t: int) -> int:
        total = 0
        for i, r in enumerate(self.reservations):
            if self.fleet.pools[self.res_pool[i]].sku_idx == s and r.status in LIVE and r.end_s > t:
                total += r.units
        return total

    def _ending(self, s: int, at: int, until: int) -> tuple[tuple[int, int], ...]:
        """The live commitments of SKU ``s`` counted at ``at`` (:meth:`_committed_at`) that end by ``until``, as
        ``(units, end_s)``, soonest first."""
        ending = [
            (r.units, r.end_s)
            for i, r in enumerate(self.reservations)
            if self.fleet.pools[self.res_pool[i]].sku_idx == s and r.status in LIVE and at < r.end_s <= until
        ]
        return tuple(sorted(ending, key=lambda c: (c[1], c[0])))

    def _procure(self, s: int, now: int, hist: np.ndarray, fc: DemandForecast | None, retry: bool = False) -> None:
        pidx = self.fleet.pool_of(s, Tier.RESERVED)
        pool = self.fleet.pools[pidx].pool
        term_end = now + pool.lead_time_s + term_seconds(pool.term_months or 12) - HOUR_S
        ctx = ProcurementContext(
            now,
            self.sku_ids[s],
            pool,
            hist,
            fc,
            self._committed_at(s, now + pool.lead_time_s),
            self.per_node[s],
            planned_runs=self.planned_runs,
            serving_asks_gpus=self._serving_asks(s, now // HOUR_S),
            ending_commitments=self._ending(s, now + pool.lead_time_s, term_end),
        )
        props = self.loop.procurer.propose(ctx)
        self.decisions.reviewed(now, pool, props)
        for prop in props:
            reason = f"retry_after_rejection: {prop.reason}" if retry else prop.reason
            res = self._new_reservation(pidx, prop.units, prop.start_s, prop.term_months)
            dec = self.loop.approver.decide(res.est_cost_usd, self.approval_threshold_usd, res.id)
            ridx = len(self.reservations) - 1
            self.metrics.reservation_proposed(res.units, float(res.est_cost_usd), dec.approvals_required)
            self.decisions.reservation(now, "bought" if dec.approvals_required == 1 else "ordered", res, pool, reason)
            if dec.approvals_required == 1:
                res.transition(ReservationStatus.APPROVED, at_s=now, actor="auto", reason=dec.reason)
                self._submit(ridx, now)
            else:
                res.transition(ReservationStatus.PENDING_APPROVAL, at_s=now, actor="procurement", reason=reason)
                self.approvals_pending[ridx] = (dec.approved, ",".join(dec.approver_ids))
                self.q.schedule(now + dec.delay_s, RES_EVENT, ridx, 0)

    def _serving_asks(self, s: int, hour: int) -> np.ndarray | None:
        """GPUs the serving replicas of SKU ``s`` were asked for at each hour before ``hour`` (replicas wanted,
        placed or not, x GPUs each; observation only); None when no fleet serves on it."""
        fleets = [(i, fr.spec.gpus_per_replica) for i, fr in enumerate(self.scheduling.fleets) if fr.sku_idx == s]
        if not fleets:
            return None
        reps = self.metrics.replicas
        return np.asarray(sum(reps[i, :hour] * g for i, g in fleets), dtype=np.float64)

    def _submit(self, ridx: int, now: int) -> None:
        res = self.reservations[ridx]
        res.transition(ReservationStatus.SUBMITTED, at_s=now, actor="provider", reason="order accepted")
        pool = self.fleet.pools[self.res_pool[ridx]].pool
        res.start_s = max(res.start_s, now + pool.lead_time_s)
        self.q.schedule(res.start_s, RES_EVENT, ridx, 1)

    def on_res_event(self, now: int, ridx: int, what: int) -> None:
        res = self.reservations[ridx]
        if what == 0:  # approvers answered
            approved, who = self.approvals_pending.pop(ridx)
            if approved:
                res.transition(ReservationStatus.APPROVED, at_s=now, actor=who, reason="dual approval")
                self.decisions.reservation(
                    now, "approved", res, self.fleet.pools[self.res_pool[ridx]].pool, "dual_approval"
                )
                self._submit(ridx, now)
            else:
                res.transition(ReservationStatus.REJECTED, at_s=now, actor=who, reason="rejected by an approver")
                self.decisions.reservation(now, "rejected", res, self.fleet.pools[self.res_pool[ridx]].pool, "rejected")
                if getattr(self.loop.procurer, "retry_rejected", False):
                    self.retry_skus.add(self.fleet.pools[self.res_pool[ridx]].sku_idx)
        elif what == 1 and res.status is ReservationStatus.SUBMITTED:
            self._activate(ridx)
        elif what == 2 and res.status is ReservationStatus.ACTIVE:
            self._expire(ridx, now)

    def _activate(self, ridx: int) -> None:
        now = self.q.now_s
        res = self.reservations[ridx]
        res.transition(ReservationStatus.ACTIVE, at_s=now, actor="provider", reason="capacity delivered")
        pidx = self.res_pool[ridx]
        pr = self.fleet.pools[pidx]
        pr.touch(now)
        pr.paid_gpus += res.units
        per = self.per_node[pr.sku_idx]
        for _ in range(math.ceil(res.units / per)):
            node = self.fleet.launch(pidx, now, up=True, reservation=ridx)
            self.res_nodes[ridx].append(node)
            self.node_events.node_alive(node, now)
        if res.end_s <= self.horizon_s:
            self.q.schedule(res.end_s, RES_EVENT, ridx, 2)
        self.scheduling.drain_queue(pr.sku_idx, now)

    def _expire(self, ridx: int, now: int) -> None:
        """The term ended: the instances keep running but now bill on demand; idle ones get scaled down."""
        res = self.reservations[ridx]
        res.transition(ReservationStatus.EXPIRED, at_s=now, actor="provider", reason="term ended")
        pidx = self.res_pool[ridx]
        pr = self.fleet.pools[pidx]
        self.decisions.reservation(now, "expired", res, pr.pool, "term_ended")
        pr.touch(now)
        pr.paid_gpus -= res.units
        od = self.fleet.pool_of(pr.sku_idx, Tier.ON_DEMAND)
        for node in self.res_nodes[ridx]:
            if self.fleet.n_state[node] != NodeState.GONE:
                for pod in self.fleet.n_pods[node]:
                    self.billing.charge(pod, now)  # close the segment billed at the reserved price
                self.fleet.move_to_pool(node, od, now)
                if self.fleet.n_state[node] == NodeState.UP and self.fleet.n_free[node] == self.fleet.n_total[node]:
                    self.fleet.n_idle_since[node] = now
