"""gpufleet's autoscalers behind the control loop's ports, so the simulator runs the same decision code.

- :class:`PredictiveReplicas` drives one :class:`PredictiveReplicaAutoscaler` per serving fleet through the
  ``ReplicaAutoscaler`` port (the world observes rps once per control period).
- :class:`PayoffAwareScaleDown` runs :class:`ClusterAutoscaler`'s scale-down rules (minimum billing, forecast
  need before a relaunch pays off, disruption budget) through the ``NodeScaler`` port. The world offers only idle
  launched nodes; the rest of the SKU's schedulable capacity enters as one node that may not be disrupted, so the
  forecast rule compares demand with the capacity that would remain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.autoscale.cluster import (
    ClusterAutoscaler,
    ClusterAutoscalerConfig,
    ClusterSnapshot,
    DemandCeiling,
    Node,
    NodeGroup,
)
from gpufleet.autoscale.forecaster import OnlineQuantileForecaster
from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.autoscale.replica import PredictiveReplicaAutoscaler, ReplicaAutoscalerConfig
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import Tier
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import MoveContext, ReplicaDecision, ReplicaSignals, ScaleDownContext

HOUR_S = 3600


class PredictiveReplicas(RatePolicy):
    """gpufleet's replica autoscaler as the control loop holds it: one :class:`PredictiveReplicaAutoscaler` per
    fleet (``ServingScaling``), configured from the fleet's declared scaling and these settings. The simulator,
    ``control.replicas.decide_scale`` and ``gpufleet bench autoscale`` all run this class.

    period_s: the decision period. Observed once per period of a minute or more (the simulator's control
      period), the forecaster's buckets and windows follow the period; shorter periods use the default forecaster.
    target_utilization: the share of ``scaling.target_rps_per_replica`` one replica is sized to carry.
    slo_s / max_concurrency / price_usd_per_replica_h: the fleet's latency SLO on queue wait (None: no burst floor),
      requests one replica serves at once (None: a batching replica) and its price (scale-to-zero rule).
    options: further :class:`ReplicaAutoscalerConfig` fields (e.g. ``{"static_floor_budget": 0.005}``), the
      same for every fleet.
    The config's scale-down window is ``max(scaling.scale_down_delay_s, period_s)``.
    """

    name = "gpufleet"

    def __init__(
        self,
        period_s: float,
        target_utilization: float = 0.8,
        *,
        slo_s: float | None = None,
        max_concurrency: int | None = None,
        price_usd_per_replica_h: float = 27.52,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.period_s = float(period_s)
        self.target_utilization = target_utilization
        self.slo_s = slo_s
        self.max_concurrency = max_concurrency
        self.price_usd_per_replica_h = price_usd_per_replica_h
        self.options: dict[str, Any] = dict(options or {})
        self._by_fleet: dict[ServingScaling, PredictiveReplicaAutoscaler] = {}

    def config_for(self, scaling: ServingScaling) -> ReplicaAutoscalerConfig:
        """The config of the fleet ``scaling`` (what :meth:`fleet` runs)."""
        try:
            return ReplicaAutoscalerConfig(
                min_replicas=scaling.min_replicas,
                max_replicas=scaling.max_replicas,
                target_per_replica=scaling.target_rps_per_replica * self.target_utilization,
                cold_start_s=float(scaling.cold_start_s),
                period_s=self.period_s,
                scale_down_stabilization_s=float(max(scaling.scale_down_delay_s, self.period_s)),
                slo_s=self.slo_s,
                max_concurrency=self.max_concurrency,
                price_usd_per_replica_h=self.price_usd_per_replica_h,
                **self.options,
            )
        except TypeError as e:  # an unknown option name
            raise ValidationError("options", str(e)) from e

    def fleet(self, scaling: ServingScaling) -> PredictiveReplicaAutoscaler:
        """The policy of one fleet (created on first use)."""
        p = self._by_fleet.get(scaling)
        if p is None:
            cfg = self.config_for(scaling)
            fc = None
            if self.period_s >= 60.0:
                # observed once per (long) period: the forecaster's buckets and windows follow it
                period = self.period_s
                fc = OnlineQuantileForecaster(
                    horizon_s=cfg.cold_start_s + period,
                    floor=cfg.target_per_replica,
                    quantile=cfg.quantile,
                    bucket_s=period,
                    level_window_s=period,
                    slow_window_s=8 * period,
                    residual_window=7 * 96,
                    refresh_buckets=24,  # every 6 h at 15 min: residual quantiles over a week move slowly
                    loss_halflife_buckets=96.0,
                )
            p = self._by_fleet[scaling] = PredictiveReplicaAutoscaler(cfg, fc)
        return p

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        return self.fleet(scaling).decide(signals)


class PayoffAwareScaleDown:
    def __init__(self, config: ClusterAutoscalerConfig | None = None) -> None:
        cfg = config or ClusterAutoscalerConfig()
        # the world offers only nodes already idle for the unneeded time, so the autoscaler's own clock starts at 0
        self.min_idle_s = int(cfg.scale_down_unneeded_s)
        self.ca = ClusterAutoscaler(replace(cfg, scale_down_unneeded_s=0.0))

    def scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]:
        groups: dict[str, NodeGroup] = {}
        nodes: list[Node] = []
        for n in ctx.idle:
            if n.pool_id not in groups:
                groups[n.pool_id] = NodeGroup(
                    n.pool_id, ctx.sku_id, Tier(n.tier), n.gpus, n.price_usd_per_gpu_h, float(n.node_start_s), 60.0
                )
            launched = ctx.now_s - n.up_for_s - n.node_start_s
            nodes.append(Node(str(n.node_id), n.pool_id, n.gpus, (), True, float(launched)))
        rest_gpus = ctx.capacity_gpus - sum(n.gpus for n in ctx.idle)
        if rest_gpus > 0:
            groups["_rest"] = NodeGroup("_rest", ctx.sku_id, Tier.RESERVED, rest_gpus, 0.0)
            nodes.append(Node("_rest", "_rest", rest_gpus, (rest_gpus,), True, 0.0, disruptable=False))
        forecasts: tuple[DemandCeiling, ...] = ()
        if ctx.forecast_gpus is not None and len(ctx.forecast_gpus):
            f: npt.NDArray[np.float64] = np.asarray(ctx.forecast_gpus, dtype=np.float64)
            t_s: npt.NDArray[np.float64] = ctx.now_s + np.arange(len(f), dtype=np.float64) * HOUR_S
            forecasts = (DemandCeiling(ctx.sku_id, t_s, f),)
        snap = ClusterSnapshot(tuple(groups.values()), tuple(nodes), (), forecasts)
        dec = self.ca.decide(snap, float(ctx.now_s))
        return [(int(t.node_id), t.reason) for t in dec.terminations if t.node_id != "_rest"]

    def moves(self, ctx: MoveContext) -> list[tuple[int, str]]:
        return []
