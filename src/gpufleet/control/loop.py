"""The control loop's stages, assembled. The simulator and the service both take a ``ControlLoop``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from gpufleet.autoscale.baselines import HpaPolicy
from gpufleet.autoscale.nodes_baseline import IdleTimeoutScaleDown
from gpufleet.autoscale.nodes_payoff import PayoffAwareNodes
from gpufleet.control.approval import SimulatedApprovers
from gpufleet.control.common_practice import PeakSizedReplicas, QuarterlyPeakProcurer
from gpufleet.control.placement import ReplicaSpread, SpotFirstForCheckpointed, running_tier_order
from gpufleet.control.procurement import ForecastLedProcurer, TierLimits
from gpufleet.control.replica_victims import COST_AWARE, KUBERNETES_DEFAULT, VictimRule
from gpufleet.control.replicas import gpufleet_replica_policy
from gpufleet.control.scheduling import FleetScheduler, QuotaAdmission, TeamQuota
from gpufleet.control.secondary_base import SecondaryBase
from gpufleet.control.start_buffer import StartBuffer
from gpufleet.domain.catalog import on_demand_usd_h
from gpufleet.domain.pools import Tier
from gpufleet.forecast.engine import GpufleetForecaster
from gpufleet.forecast.seasonal_naive import SeasonalNaive
from gpufleet.place.chain import DegradingChain
from gpufleet.place.fallback import FallbackChain
from gpufleet.ports import Approver, Forecaster, NodeScaler, Placer, Procurer, ReplicaAutoscaler
from gpufleet.procure.baseline import LookbackPercentile


@dataclass(slots=True)
class ControlLoop:
    """forecast -> procure -> approve -> place -> schedule -> autoscale -> meter.

    Scheduling (quota admission, placement with the named ``scheduler_policy``, preemption) is asked on every
    pod the world cannot run yet; metering runs on every pod; the other stages are called at their own cadence
    (autoscaling every control period, forecasting daily, procurement every few days).
    """

    name: str
    forecaster: Forecaster
    procurer: Procurer
    approver: Approver
    placer: Placer
    autoscaler: ReplicaAutoscaler
    node_scaler: NodeScaler
    scheduler_policy: str = "bestfit"  # one of gpufleet.schedule.classes.CLASS_POLICIES
    preemption: bool = False  # checkpoint-aware priority preemption (control/scheduling.py)
    preempt_grace_s: int = 120
    # a gang may empty whole nodes of lower-priority single-node training (needs ``preemption``; same cost gate)
    gang_preemption: bool = False
    consolidation: bool = False  # hourly drains of part-used launched nodes (control/scheduling.plan_drains)
    cheapest_running_first: bool = False  # on running nodes, launched tiers by price (else reliability order)
    # the preemption gate's price of a serving request missed while a replica waits for a node (0: waiting costs
    # the replica's idle GPU-hours only); GPU-hours are priced at the SKU's on-demand list price
    serving_breach_cost_usd: float = 0.0
    # SLO-aware admission control at each serving fleet's gateway (Ray Serve's max_queued_requests, a KServe /
    # Envoy queue limit): a request is admitted only while its expected queue wait at arrival is within this many
    # times the fleet's latency SLO, else rejected at once (a miss that costs no GPU work). None: every request is
    # queued (an unbounded FIFO). The world applies the limit (sim/serving.py, sim/queueing.PeriodQueue).
    queue_limit_slo: float | None = None
    # which replica a fleet stops when it scales down (control/replica_victims.py): Kubernetes' default (not ready
    # first, then the newest) or the cost-aware rule (not ready first, then the one on the dearest node)
    replica_victims: VictimRule = KUBERNETES_DEFAULT
    # the procurer's demand history: GPUs in use + pending (True), or in use only (False: a queue is work deferred,
    # not a level that lasts a commitment's term; counted hourly while it waits it would be counted again when it runs)
    procure_on_pending: bool = True
    # a serving replica prefers nodes holding fewer of its fleet's replicas (control/placement.ReplicaSpread; None: off)
    replica_spread: ReplicaSpread | None = None
    # hold secondary-provider nodes under the GPUs rented on demand (control/secondary_base.py; None: off)
    secondary_base: SecondaryBase | None = None
    # hold whole nodes free while training starts late against its objective (control/start_buffer.py; None: off)
    start_buffer: StartBuffer | None = None

    def queue_wait_limit_s(self, slo_s: float) -> float | None:
        """The admission limit on a fleet's expected queue wait (s) for its latency SLO; None: no limit."""
        return None if self.queue_limit_slo is None else self.queue_limit_slo * slo_s

    def running_tiers(self, checkpointed: bool, prices: Mapping[Tier, Decimal]) -> tuple[Tier, ...]:
        """The tiers a pod of one SKU may use, in the order placement tries running nodes (``prices`` per tier)."""
        return running_tier_order(self.cheapest_running_first, checkpointed, prices)

    def scheduler(self, sku_ids: Sequence[str], gpus_per_node: Sequence[int], seed: int) -> FleetScheduler:
        """The scheduling stage for a fleet of these SKUs (its tie-break randomness seeded from ``seed``)."""
        rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
        return FleetScheduler(
            self.scheduler_policy,
            sku_ids,
            gpus_per_node,
            rng,
            preemption=self.preemption,
            grace_s=self.preempt_grace_s,
            breach_cost_usd=self.serving_breach_cost_usd,
            gpu_usd_h=[on_demand_usd_h(s) for s in sku_ids] if self.serving_breach_cost_usd > 0 else (),
            gang_preemption=self.gang_preemption,
            spread=self.replica_spread,
        )

    @staticmethod
    def admission(quotas: Sequence[TeamQuota]) -> QuotaAdmission:
        """The quota gate (the same in every loop: quotas are the organisation's, not a policy)."""
        return QuotaAdmission(quotas)

    @classmethod
    def baseline(cls, seed: int, target_utilization: float = 0.7, idle_node_timeout_s: int = 600) -> ControlLoop:
        """The foundation's simple, real policies (best-fit scheduling, no preemption); later stages are
        measured against these."""
        return cls(
            name="baseline",
            forecaster=SeasonalNaive(),
            procurer=LookbackPercentile(percentile=50.0),
            approver=SimulatedApprovers(np.random.default_rng(np.random.SeedSequence([seed, 1]))),
            placer=FallbackChain(),
            # Kubernetes HPA; its scale-down window is each fleet's scale_down_delay_s
            autoscaler=HpaPolicy(target_utilization=target_utilization, scale_down_stabilization_s=None),
            node_scaler=IdleTimeoutScaleDown(unneeded_s=idle_node_timeout_s),
        )

    @classmethod
    def common_practice(cls, seed: int, idle_node_timeout_s: int = 600, control_period_s: int = 900) -> ControlLoop:
        """What teams do today: a quarterly review reserves for the forecast peak, serving replicas are sized
        for the week's peak and left static, best-fit placement, nodes idle 10 minutes are scaled down
        (Cluster Autoscaler), no consolidation, no preemption, no budgets (control/common_practice.py)."""
        base = cls.baseline(seed, idle_node_timeout_s=idle_node_timeout_s)
        base.name = "common_practice"
        base.procurer = QuarterlyPeakProcurer()
        base.autoscaler = PeakSizedReplicas(control_period_s)
        return base

    @classmethod
    def gpufleet(
        cls,
        seed: int,
        target_utilization: float = 0.7,
        idle_node_timeout_s: int = 600,
        control_period_s: int = 900,
        scheduler_policy: str = "gpufleet",
        preemption: bool = True,
        tier_limits: dict[str, TierLimits] | None = None,
    ) -> ControlLoop:
        """gpufleet's own stages; a stage not yet replaced is the baseline's."""
        base = cls.baseline(seed, target_utilization, idle_node_timeout_s)
        base.name = "gpufleet"
        base.forecaster = GpufleetForecaster()
        base.procurer = ForecastLedProcurer(tier_limits or {})
        # a checkpointed launch larger than the spot room: its whole nodes that fit go to spot (session 14)
        base.placer = SpotFirstForCheckpointed(DegradingChain(), split=True)
        base.cheapest_running_first = True
        base.autoscaler = spare = gpufleet_replica_policy(control_period_s)
        base.serving_breach_cost_usd = spare.breach_cost_usd  # the same price of a missed request
        # idle launched nodes held while a relaunch's wait (LOOP_DELAY_WEIGHT = 4 node starts at on-demand) costs more
        base.node_scaler = PayoffAwareNodes.default(idle_node_timeout_s)
        base.scheduler_policy = scheduler_policy
        base.preemption = preemption
        base.gang_preemption = preemption  # gangs preempt lower-priority work too (schedule/preemption.py)
        base.consolidation = True
        base.queue_limit_slo = 1.0  # shed a request that would wait past its SLO rather than delay later ones
        base.replica_victims = COST_AWARE  # scale down the replicas on dear on-demand nodes first
        base.procure_on_pending = False  # commitments follow the GPUs in use, not the queue (session 14)
        base.replica_spread = ReplicaSpread(0.25)  # one node's failure takes at most ~a quarter of a fleet (session 17)
        # secondary nodes held under the GPUs rented on demand where the provider is cheaper (session 19)
        base.secondary_base = SecondaryBase()
        # nodes held free while the fleet's training starts late against 95% within 60 s (sessions 24-25), steered
        # at 80 % of the late share the objective allows, checkpointed training's on spot nodes (session 26)
        base.start_buffer = StartBuffer(setpoint=0.8, max_nodes=2, spot=True)
        return base
