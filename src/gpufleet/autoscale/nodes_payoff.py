"""gpufleet's node scaler behind the ``NodeScaler`` port: shortfall scale-up and rent-or-buy scale-down.

- Scale-up (:func:`~gpufleet.autoscale.node_rules.shortfall_nodes`): a gang gets only the whole nodes that free,
  starting and freeing nodes (busy ones whose work reports it ends before a new node would be ready) of its SKU
  do not already cover; a single pod gets no node while one is freeing for it. The foundation launches the
  gang's full count; measured on the default scenario, 35% of the nodes it launched never ran a pod
  (docs/benchmarks/cluster-autoscale.md).
- Scale-down: nothing goes while work of the SKU is pending (it may want the node; Cluster Autoscaler's rule too).
  An idle launched node is kept while the rent-or-buy rule says holding it costs less than a relaunch
  (:func:`~gpufleet.autoscale.idle_spells.keep_idle_node`, reason ``rent_or_buy_hold``), with the buy cost of
  :func:`~gpufleet.autoscale.node_rules.rent_or_buy_hold_s` and the gap distribution learned online per pool from
  the idle spells this scaler watches (a node that leaves the idle list without being terminated was reused).
  The nodes it lets go then pass :class:`PayoffAwareScaleDown`'s rules (forecast need before a relaunch pays off,
  disruption budget).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpufleet.autoscale.cluster import ClusterAutoscalerConfig
from gpufleet.autoscale.idle_spells import IdleSpells, keep_idle_node
from gpufleet.autoscale.loop_adapters import PayoffAwareScaleDown
from gpufleet.autoscale.node_rules import rent_or_buy_hold_s, shortfall_nodes
from gpufleet.ports import ScaleDownContext, ScaleUpContext

MIN_BILLING_S = 60.0  # per-second billing with a one-minute minimum (AWS, GCP Linux instances)


@dataclass(slots=True)
class _Open:
    sku_id: str
    pool_id: str
    start_s: int
    last_seen_s: int


class PayoffAwareNodes(PayoffAwareScaleDown):
    """``delay_weight``: see :func:`rent_or_buy_hold_s`. ``learn_gaps``: decide holds from the idle spells learned
    per pool (:func:`keep_idle_node`) instead of the deterministic break-even (measured no better, so off).
    ``wait_for_freeing``: count busy nodes whose work reports it ends before a launch would be ready
    (``ScaleUpContext.freeing_nodes``) as capacity on its way."""

    @classmethod
    def default(cls, idle_node_timeout_s: int = 600) -> PayoffAwareNodes:
        """gpufleet's setting: the hourly demand forecast does not gate scale-down (measured: at equal cost the
        rent-or-buy hold removes more launches than the forecast rule; docs/autoscale.md)."""
        return cls(ClusterAutoscalerConfig(scale_down_unneeded_s=float(idle_node_timeout_s), use_forecast=False))

    def __init__(
        self,
        config: ClusterAutoscalerConfig | None = None,
        delay_weight: float = 1.0,
        learn_gaps: bool = False,
        wait_for_freeing: bool = True,
    ) -> None:
        super().__init__(config)
        self.wait_for_freeing = wait_for_freeing
        self.delay_weight = delay_weight
        self.learn_gaps = learn_gaps
        self.spells: dict[str, IdleSpells] = {}  # pool id -> recent idle spells
        self.held: dict[str, int] = {}  # reason -> hold decisions (for reports)
        self._open: dict[int, _Open] = {}
        self._last_call: dict[str, int] = {}
        self._period_s: dict[str, int] = {}  # shortest interval seen between calls, per SKU

    def nodes_to_launch(self, ctx: ScaleUpContext) -> int:
        freeing = ctx.freeing_nodes if self.wait_for_freeing else 0
        if not ctx.gang:  # the world only asks while queued demand exceeds what is starting
            return 0 if freeing > 0 else ctx.need_nodes
        return shortfall_nodes(ctx.need_nodes, ctx.free_whole_nodes, ctx.starting_nodes, freeing)

    def scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]:
        self._watch(ctx)
        if ctx.pending_gpus > 0:
            self._count("needed_by_pending_work", len(ctx.idle))
            return []
        past = [n for n in ctx.idle if not self._keep(n.pool_id, n.idle_for_s, n.node_start_s)]
        self._count("rent_or_buy_hold", len(ctx.idle) - len(past))
        if not past:
            return []
        out = super().scale_down(replace(ctx, idle=past))
        for node_id, _ in out:
            o = self._open.pop(node_id, None)
            if o is not None:
                self._pool(o.pool_id).add(ctx.now_s - o.start_s, reused=False)
        return out

    def _keep(self, pool_id: str, idle_s: int, node_start_s: int) -> bool:
        buy = rent_or_buy_hold_s(float(node_start_s), MIN_BILLING_S, self.delay_weight)
        if not self.learn_gaps:
            return idle_s < buy
        return keep_idle_node(self._pool(pool_id), float(idle_s), buy)

    def _pool(self, pool_id: str) -> IdleSpells:
        s = self.spells.get(pool_id)
        if s is None:
            s = self.spells[pool_id] = IdleSpells()
        return s

    def _watch(self, ctx: ScaleDownContext) -> None:
        """Close the spells of this SKU's nodes that left the idle list (reused) and open the new ones."""
        now, sku = ctx.now_s, ctx.sku_id
        last = self._last_call.get(sku)
        if last is not None and now > last:
            self._period_s[sku] = min(self._period_s.get(sku, now - last), now - last)
        self._last_call[sku] = now
        period = self._period_s.get(sku, 0)
        here = {n.node_id: n for n in ctx.idle}
        for node_id, o in list(self._open.items()):
            n = here.get(node_id)
            if o.sku_id != sku or (n is not None and now - n.idle_for_s == o.start_s):
                continue
            end = o.last_seen_s + min(now - o.last_seen_s, period) / 2  # reused between two looks
            self._pool(o.pool_id).add(end - o.start_s, reused=True)
            del self._open[node_id]
        for n in ctx.idle:
            seen = self._open.get(n.node_id)
            if seen is None:
                self._open[n.node_id] = _Open(sku, n.pool_id, now - n.idle_for_s, now)
            else:
                seen.last_seen_s = now

    def _count(self, reason: str, k: int) -> None:
        if k:
            self.held[reason] = self.held.get(reason, 0) + k
