"""gpufleet's autoscalers behind the control loop's ports, so the simulator runs the same decision code.

- :class:`PredictiveReplicas` drives one :class:`PredictiveReplicaAutoscaler` per serving fleet through the
  ``ReplicaAutoscaler`` port (the world observes once per control period: the request rate and, when it
  measures its queue, a :class:`~gpufleet.ports.ServingObservation`, as ``gpufleet bench autoscale`` does).
- :class:`PayoffAwareScaleDown` runs :class:`ClusterAutoscaler`'s scale-down rules (minimum billing, forecast
  need before a relaunch pays off, disruption budget) through the ``NodeScaler`` port. The world offers only idle
  launched nodes; the rest of the SKU's schedulable capacity enters as one node that may not be disrupted, so the
  forecast rule compares demand with the capacity that would remain.
"""

from __future__ import annotations

from dataclasses import replace

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
from gpufleet.autoscale.replica import PredictiveReplicaAutoscaler, ReplicaAutoscalerConfig
from gpufleet.autoscale.signals import ReplicaSignals
from gpufleet.domain.pools import Tier
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import MoveContext, ScaleDownContext, ServingObservation

HOUR_S = 3600


class PredictiveReplicas:
    def __init__(self, period_s: int, target_utilization: float = 0.8) -> None:
        self.period_s = period_s
        self.target_utilization = target_utilization
        self._by_fleet: dict[tuple[ServingScaling, float | None, int | None], PredictiveReplicaAutoscaler] = {}

    def _policy(
        self, scaling: ServingScaling, slo_s: float | None = None, max_concurrency: int | None = None
    ) -> PredictiveReplicaAutoscaler:
        key = (scaling, slo_s, max_concurrency)
        p = self._by_fleet.get(key)
        if p is None:
            # with a measured queue (``slo_s`` set) the burst floor, the SLO error budget and, for one request per
            # replica (``max_concurrency``), Erlang C staffing run as in ``gpufleet bench autoscale``
            cfg = ReplicaAutoscalerConfig(
                min_replicas=scaling.min_replicas,
                max_replicas=scaling.max_replicas,
                target_per_replica=scaling.target_rps_per_replica * self.target_utilization,
                cold_start_s=float(scaling.cold_start_s),
                period_s=float(self.period_s),
                scale_down_stabilization_s=float(max(scaling.scale_down_delay_s, self.period_s)),
                slo_s=slo_s,
                max_concurrency=max_concurrency,
                react_periods=1,  # a load that lasted a whole control period (minutes) is not a passing spike
            )
            # the simulator observes once per control period: the forecaster's buckets and windows follow it
            period = float(self.period_s)
            fc = OnlineQuantileForecaster(
                horizon_s=cfg.cold_start_s + period,
                floor=cfg.target_per_replica,
                quantile=cfg.quantile,
                bucket_s=period,
                level_window_s=period,
                slow_window_s=8 * period,
                residual_window=7 * 96,
                refresh_buckets=24,  # every 6 h: residual quantiles over a week move slowly
                loss_halflife_buckets=96.0,
            )
            p = self._by_fleet[key] = PredictiveReplicaAutoscaler(cfg, fc)
        return p

    def desired(
        self,
        *,
        current: int,
        observed_rps: float,
        scaling: ServingScaling,
        now_s: int,
        last_scale_down_s: int,
        observed: ServingObservation | None = None,
    ) -> tuple[int, str]:
        if observed is None:
            signals = ReplicaSignals(
                now_s=float(now_s),
                ready=current,
                starting=0,
                period_s=float(self.period_s),
                arrival_rps=observed_rps,
                concurrency=0.0,
                queue_depth=0,
                load_replicas=observed_rps / scaling.target_rps_per_replica,
            )
            d = self._policy(scaling).decide(signals)
            return d.desired, d.reason
        o = observed
        signals = ReplicaSignals(
            now_s=float(now_s),
            ready=o.ready,
            starting=o.starting,
            period_s=o.period_s,
            arrival_rps=observed_rps,
            concurrency=o.concurrency,
            queue_depth=o.queue_depth,
            load_replicas=o.load_replicas,
            peak_concurrency=o.peak_concurrency,
            slo_misses=o.slo_misses,
        )
        d = self._policy(scaling, o.slo_s, o.max_concurrency).decide(signals)
        return d.desired, d.reason


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
