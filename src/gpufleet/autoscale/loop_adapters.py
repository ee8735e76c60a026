"""gpufleet's replica autoscaler behind the control loop's port, so every world and the bench run the same code:
:class:`PredictiveReplicas` drives one :class:`PredictiveReplicaAutoscaler` per serving fleet through
:class:`gpufleet.ports.ReplicaAutoscaler` (the node scaler is :mod:`gpufleet.autoscale.nodes_payoff`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.autoscale.forecaster import OnlineQuantileForecaster
from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.autoscale.replica import PredictiveReplicaAutoscaler, ReplicaAutoscalerConfig
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals


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
      same for every fleet; ``fleet_options``: fields of one fleet (keyed by its ``ServingScaling``), over
      ``options``: a world whose fleets differ in SLO or queue sets ``slo_s`` / ``max_concurrency`` here.
    Observed once per period of a minute or more, a fleet reacts to a load that lasted one period
    (``react_periods=1``) unless the options say otherwise.
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
        fleet_options: Mapping[ServingScaling, Mapping[str, Any]] | None = None,
    ) -> None:
        self.period_s = float(period_s)
        self.target_utilization = target_utilization
        self.slo_s = slo_s
        self.max_concurrency = max_concurrency
        self.price_usd_per_replica_h = price_usd_per_replica_h
        self.options: dict[str, Any] = dict(options or {})
        self.fleet_options: dict[ServingScaling, dict[str, Any]] = {
            k: dict(v) for k, v in (fleet_options or {}).items()
        }
        self._by_fleet: dict[ServingScaling, PredictiveReplicaAutoscaler] = {}

    def config_for(self, scaling: ServingScaling) -> ReplicaAutoscalerConfig:
        """The config of the fleet ``scaling`` (what :meth:`fleet` runs)."""
        kw: dict[str, Any] = {
            "slo_s": self.slo_s,
            "max_concurrency": self.max_concurrency,
            "price_usd_per_replica_h": self.price_usd_per_replica_h,
        }
        if self.period_s >= 60.0:
            kw["react_periods"] = 1  # a load that lasted a whole (long) period is not a passing spike
        if scaling.budget_usd_day is not None:
            kw["budget_usd_day"] = scaling.budget_usd_day  # the fleet's declared budget binds its policy
        kw.update(self.options)
        kw.update(self.fleet_options.get(scaling, {}))
        try:
            return ReplicaAutoscalerConfig(
                min_replicas=scaling.min_replicas,
                max_replicas=scaling.max_replicas,
                target_per_replica=scaling.target_rps_per_replica * self.target_utilization,
                cold_start_s=float(scaling.cold_start_s),
                period_s=self.period_s,
                scale_down_stabilization_s=float(max(scaling.scale_down_delay_s, self.period_s)),
                **kw,
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
                    warmup_ratio=cfg.peak_headroom,
                )
            p = self._by_fleet[scaling] = PredictiveReplicaAutoscaler(cfg, fc)
        return p

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        return self.fleet(scaling).decide(signals)

    def react(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision | None:
        """The fleet's fast path (:meth:`PredictiveReplicaAutoscaler.react`)."""
        return self.fleet(scaling).react(signals)
