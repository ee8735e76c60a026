"""gpufleet's node scaler behind the ``NodeScaler`` port: shortfall scale-up and rent-or-buy scale-down.

- Scale-up (:func:`~gpufleet.autoscale.node_rules.shortfall_nodes`): a gang gets only the whole nodes that free,
  starting and freeing nodes (busy ones whose work reports it ends before a new node would be ready) of its SKU
  do not already cover; a single pod gets no node while one is freeing for it. The foundation launches the
  gang's full count; measured on the default scenario, 35% of the nodes it launched never ran a pod
  (docs/benchmarks/cluster-autoscale.md).
- Scale-down: nothing goes while work of the SKU is pending (it may want the node; Cluster Autoscaler's rule too),
  nor a node of a pool that is out of stock (``out_of_stock_hold``: once let go it cannot be had back for hours,
  whatever its node start; the next rise would wait for stock or for a slower tier).
  An idle launched node is kept while the rent-or-buy rule says holding it costs less than a relaunch
  (:func:`~gpufleet.autoscale.idle_spells.keep_idle_node`, reason ``rent_or_buy_hold``), with the buy cost of
  :func:`~gpufleet.autoscale.node_rules.rent_or_buy_hold_s` and the gap distribution learned online per pool from
  the idle spells this scaler watches (a node that leaves the idle list without being terminated was reused).
  With ``count_needs`` (on in :meth:`PayoffAwareNodes.default`) the holds are also capped by the SKU's recent
  need for fresh nodes (:func:`~gpufleet.autoscale.node_rules.expected_use_holds`): an idle node is held only while
  fewer held nodes come before it than the nodes the SKU's work needed (launched, or idle ones reused:
  :class:`NeedCounts`) per break-even time of that node, averaged over the last :data:`NEED_SPANS` of them
  (:meth:`NeedCounts.expected`; one span until session 17).
  The nodes it lets go then pass the scale-down rules of :mod:`gpufleet.autoscale.cluster` (minimum billing,
  forecast need before a relaunch pays off, disruption budget). The world offers only idle launched nodes; the rest
  of the SKU's schedulable capacity enters those rules as one node that may not be disrupted, so the forecast rule
  compares demand with the capacity that would remain. The wait a relaunch causes is priced at on-demand (``ScaleDownContext.wait_price_usd_per_gpu_h``),
  so spot and secondary nodes, cheaper per second, are held longer than on-demand ones.
- Consolidation (:func:`~gpufleet.autoscale.node_rules.moves_to_reserved`, reason ``long_run_to_idle_reserved``):
  a gang with a day or more left moves, just after a checkpoint, from launched nodes onto reserved nodes idle for
  an hour or more.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from gpufleet.autoscale.cluster import (
    ClusterSnapshot,
    DemandCeiling,
    Node,
    NodeGroup,
    ScaleDownConfig,
    ScaleDownRules,
)
from gpufleet.autoscale.idle_spells import IdleSpells, keep_idle_node
from gpufleet.autoscale.node_rules import (
    cap_can_bind,
    capped_holds,
    moves_to_reserved,
    rent_or_buy_hold_s,
    shortfall_nodes,
)
from gpufleet.domain.pools import Tier
from gpufleet.ports import IdleNode, MoveContext, ScaleDownContext, ScaleUpContext, within_buffer

MIN_BILLING_S = 60.0  # per-second billing with a one-minute minimum (AWS, GCP Linux instances)
# the gpufleet loop's weight of the wait a relaunch causes: 4 node starts of the work's GPUs at on-demand (2 before
# session 14; 4 chosen among 2, 3, 3.5 and 4 on the default scenario's tuning seeds 11-16 with gang preemption, the
# split spot launch and procurement on the GPUs in use all on: the cheapest whose p95 training wait is no worse than
# the baseline loop's; docs/benchmarks/loop.md, session 14). The default of :meth:`PayoffAwareNodes.default`, so
# that bench cluster-autoscale measures the node scaler the loop runs.
LOOP_DELAY_WEIGHT = 4.0
HOUR_S = 3600


KEEP_NEEDS_S = 7 * 24 * HOUR_S  # needs kept at least this long (longer if a break-even asks for it)
# break-even spans over which a SKU's recent need for fresh nodes is averaged (:meth:`NeedCounts.expected`): the
# mean of the needs of each of the last NEED_SPANS spans, so that one burst does not decide a hold alone (1: session
# 15's count within one span; 3 chosen in session 17 on the default scenario's tuning seeds 11-16 against 1 and
# the mean of the rates over the nested 1, 2 (and 3) spans back: docs/benchmarks/cluster-autoscale.md, "Session 17")
NEED_SPANS = 3
SPOT = Tier.SPOT.value  # IdleNode.tier of a spot node (hosts checkpointed training only)


class NeedCounts:
    """Fresh whole nodes one SKU's work needed recently: nodes launched for it and idle launched nodes it reused.
    :meth:`within` counts those of the last ``span_s`` (None until that long has been watched); :meth:`expected`
    averages the rate over several spans back."""

    __slots__ = ("_base", "_cum", "_first_s", "_keep_s", "_lo", "_times", "_total")

    def __init__(self) -> None:
        self._times: list[int] = []  # event times, ascending (from index ``_lo`` on)
        self._cum: list[int] = []  # nodes needed up to and including each event
        self._lo = 0
        self._base = 0  # nodes needed up to the last event dropped
        self._total = 0
        self._first_s: int | None = None
        self._keep_s = float(KEEP_NEEDS_S)  # older events are dropped (the longest span asked for, at least a week)

    def watch(self, now_s: int) -> None:
        if self._first_s is None:
            self._first_s = now_s

    def add(self, now_s: int, nodes: int) -> None:
        """``nodes`` needed at ``now_s``; a time before the last need's (a clock stepped back) counts at that one, so
        the times stay in order for :meth:`within`'s bisection."""
        self.watch(now_s)
        if self._times and now_s < self._times[-1]:
            now_s = self._times[-1]
        if nodes > 0:
            self._total += nodes
            self._times.append(now_s)
            self._cum.append(self._total)

    def within(self, now_s: int, span_s: float) -> int | None:
        if self._first_s is None or now_s - self._first_s < span_s:
            return None
        self._keep_s = max(self._keep_s, span_s)
        times, cum = self._times, self._cum
        lo = bisect_right(times, now_s - self._keep_s, self._lo)
        if lo > 1024 and lo * 2 > len(times):  # drop what no span asked for can reach
            self._base = cum[lo - 1]
            del times[:lo], cum[:lo]
            lo = 0
        self._lo = lo
        i = bisect_right(times, now_s - span_s, lo)
        before = cum[i - 1] if i > 0 else self._base
        return self._total - before

    def expected(self, now_s: int, span_s: float, spans: int = NEED_SPANS) -> float | None:
        """Fresh nodes expected to be needed within ``span_s``: the mean of the needs of each of the last ``spans``
        spans of ``span_s`` (the needs of the last ``spans`` x ``span_s`` over ``spans``; fewer spans while the SKU
        has been watched for less; None until one span has been)."""
        if spans < 1:
            raise ValueError("spans must be >= 1")
        one = self.within(now_s, span_s)
        if one is None:
            return None
        for k in range(spans, 1, -1):  # the most spans already watched
            c = self.within(now_s, k * span_s)
            if c is not None:
                return c / k
        return float(one)


@dataclass(slots=True)
class _Open:
    """An idle spell being watched (kept under its SKU in ``PayoffAwareNodes._open``)."""

    pool_id: str
    start_s: int
    last_seen_s: int


class PayoffAwareNodes:
    """``delay_weight``: see :func:`rent_or_buy_hold_s` (the constructor's 2 was chosen in session 3 with
    consolidation on, docs/benchmarks/cluster-autoscale.md; gpufleet's :meth:`default` uses
    :data:`LOOP_DELAY_WEIGHT`). ``learn_gaps``: decide holds from the idle spells learned per pool
    (:func:`keep_idle_node`) instead of the deterministic break-even (measured no better, so off).
    ``wait_for_freeing``: count busy nodes whose work reports it ends before a launch would be ready
    (``ScaleUpContext.freeing_nodes``) as capacity on its way. ``move_to_reserved``: consolidation
    (:func:`moves_to_reserved`). ``count_needs``: hold no more idle nodes than the fresh nodes the SKU needed over
    each node's break-even time (:func:`~gpufleet.autoscale.node_rules.expected_use_holds`; no setting; on in
    :meth:`default` since session 15, measured on the default scenario's tuning seeds 11-16,
    docs/benchmarks/loop.md)."""

    @classmethod
    def default(cls, idle_node_timeout_s: int = 600, delay_weight: float = LOOP_DELAY_WEIGHT) -> PayoffAwareNodes:
        """gpufleet's setting, the node scaler its loop runs: the hourly demand forecast does not gate scale-down
        (measured: at equal cost the rent-or-buy hold removes more launches than the forecast rule;
        docs/autoscale.md); ``delay_weight``: see :func:`rent_or_buy_hold_s` (:data:`LOOP_DELAY_WEIGHT`); the holds
        capped by the recent need for fresh nodes (``count_needs``)."""
        return cls(
            ScaleDownConfig(scale_down_unneeded_s=float(idle_node_timeout_s), use_forecast=False),
            delay_weight=delay_weight,
            count_needs=True,
        )

    def __init__(
        self,
        config: ScaleDownConfig | None = None,
        delay_weight: float = 2.0,
        learn_gaps: bool = False,
        wait_for_freeing: bool = True,
        move_to_reserved: bool = True,
        count_needs: bool = False,
    ) -> None:
        cfg = config or ScaleDownConfig()
        # the world offers only nodes already idle for the unneeded time, so the rules' own clock starts at 0
        self.min_idle_s = int(cfg.scale_down_unneeded_s)
        self.rules = ScaleDownRules(replace(cfg, scale_down_unneeded_s=0.0))
        self.wait_for_freeing = wait_for_freeing
        self.move_to_reserved = move_to_reserved
        self.delay_weight = delay_weight
        self.learn_gaps = learn_gaps
        self.count_needs = count_needs
        self.needs: dict[str, NeedCounts] = {}  # SKU -> recent fresh-node needs (with ``count_needs``)
        self.spells: dict[str, IdleSpells] = {}  # pool id -> recent idle spells
        self.held: dict[str, int] = {}  # reason -> hold decisions (for reports)
        self._open: dict[str, dict[int, _Open]] = {}  # per SKU: node id -> its open idle spell
        self._last_call: dict[str, int] = {}
        self._period_s: dict[str, int] = {}  # shortest interval seen between calls, per SKU

    def nodes_to_launch(self, ctx: ScaleUpContext) -> int:
        freeing = ctx.freeing_nodes if self.wait_for_freeing else 0
        if not ctx.gang:  # the world only asks while queued demand exceeds what is starting
            k = 0 if freeing > 0 else ctx.need_nodes
        else:
            k = shortfall_nodes(ctx.need_nodes, ctx.free_whole_nodes, ctx.starting_nodes, freeing)
        need = self._need(ctx.sku_id)
        if need is not None:
            need.add(ctx.now_s, k)
        return k

    def scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]:
        self._watch(ctx)
        need = self._need(ctx.sku_id)
        if need is not None and ctx.fresh_nodes > 0:  # launched by another component: needs all the same
            need.add(ctx.now_s, ctx.fresh_nodes)
        if ctx.pending_gpus > ctx.unreachable_gang_gpus:
            self._count("needed_by_pending_work", len(ctx.idle))
            return []
        if ctx.pending_gpus > 0:  # only gangs out of reach wait: idle nodes go by the ordinary holds below
            self._count("pending_gang_out_of_reach", len(ctx.idle))
        gone = ctx.out_of_stock_pools
        idle = [n for n in ctx.idle if n.pool_id not in gone] if gone else ctx.idle
        self._count("out_of_stock_hold", len(ctx.idle) - len(idle))
        holds: dict[tuple[int, float], float] = {}  # hold_s per (node start, price): per pool, not per idle node
        if need is None or self.learn_gaps:
            past = [n for n in idle if not self._keep(n, ctx.wait_price_usd_per_gpu_h, holds)]
        else:
            past = self._capped_past(idle, need, ctx.now_s, ctx.wait_price_usd_per_gpu_h, holds)
        self._count("rent_or_buy_hold", len(idle) - len(past))
        if not past:
            return []
        out = self._rules_scale_down(replace(ctx, idle=past))
        kept = within_buffer(ctx, out)
        self._count("start_buffer_hold", len(out) - len(kept))
        out = kept
        spells = self._open.get(ctx.sku_id, {})
        for node_id, _ in out:
            o = spells.pop(node_id, None)
            if o is not None:
                self._pool(o.pool_id).add(max(0, ctx.now_s - o.start_s), reused=False)
        return out

    def _capped_past(
        self,
        idle: Sequence[IdleNode],
        need: NeedCounts,
        now_s: int,
        wait_price_usd_per_gpu_h: float,
        holds: dict[tuple[int, float], float],
    ) -> list[IdleNode]:
        """The idle nodes :func:`~gpufleet.autoscale.node_rules.expected_use_holds` lets go (in the given order),
        without building a candidate per node: the nodes past their break-even go; the need cap is ranked
        (:func:`capped_holds`) only if it can bind (:func:`cap_can_bind`), i.e. if more nodes are within their
        break-even than the smallest need among them."""
        past: list[IdleNode] = []
        held: list[int] = []  # positions in ``idle`` of the nodes within their break-even
        held_needs: list[float | None] = []
        seen: dict[float, float | None] = {}  # needs expected within a buy time, per buy time
        lowest: float | None = None  # the smallest need among the held nodes
        for i, n in enumerate(idle):
            buy = self._buy(n, wait_price_usd_per_gpu_h, holds)
            if n.idle_for_s >= buy:
                past.append(n)
                continue
            if buy in seen:
                e = seen[buy]
            else:
                e = seen[buy] = need.expected(now_s, buy)
            held.append(i)
            held_needs.append(e)
            if e is not None and (lowest is None or e < lowest):
                lowest = e
        if not cap_can_bind(len(held), lowest):
            return past
        capped = capped_holds(
            [idle[i].price_usd_per_gpu_h for i in held],
            [idle[i].idle_for_s for i in held],
            [idle[i].tier == SPOT for i in held],
            held_needs,
        )
        keep = [False] * len(idle)
        for i, k in zip(held, capped, strict=True):
            keep[i] = k
        return [n for n, k in zip(idle, keep, strict=True) if not k]

    def _rules_scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]:
        """The scale-down rules on the offered idle nodes (the SKU's other capacity as one undisruptable node)."""
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
        snap = ClusterSnapshot(tuple(groups.values()), tuple(nodes), forecasts)
        dec = self.rules.decide(snap, float(ctx.now_s))
        return [(int(t.node_id), t.reason) for t in dec.terminations if t.node_id != "_rest"]

    def moves(self, ctx: MoveContext) -> list[tuple[int, str]]:
        if not self.move_to_reserved:
            return []
        out = moves_to_reserved(ctx.running, ctx.reserved_idle_s)
        self._count("moved_to_reserved", len(out))
        return out

    def hold_s(self, n: IdleNode, wait_price_usd_per_gpu_h: float) -> float:
        """The rent-or-buy hold of idle node ``n``: the wait a relaunch causes at ``wait_price_usd_per_gpu_h``
        (0 or an unpriced node: at the node's own price)."""
        p = n.price_usd_per_gpu_h
        ratio = wait_price_usd_per_gpu_h / p if wait_price_usd_per_gpu_h > 0 and p > 0 else 1.0
        return rent_or_buy_hold_s(float(n.node_start_s), MIN_BILLING_S, self.delay_weight, ratio)

    def _keep(self, n: IdleNode, wait_price_usd_per_gpu_h: float, holds: dict[tuple[int, float], float]) -> bool:
        """Hold idle node ``n`` on; ``holds``: :meth:`hold_s` by (node start, price) at this wait price (a memo:
        the hold reads nothing else of the node)."""
        buy = self._buy(n, wait_price_usd_per_gpu_h, holds)
        if not self.learn_gaps:
            return n.idle_for_s < buy
        return keep_idle_node(self._pool(n.pool_id), float(n.idle_for_s), buy)

    def _buy(self, n: IdleNode, wait_price_usd_per_gpu_h: float, holds: dict[tuple[int, float], float]) -> float:
        key = (n.node_start_s, n.price_usd_per_gpu_h)
        buy = holds.get(key)
        if buy is None:
            buy = holds[key] = self.hold_s(n, wait_price_usd_per_gpu_h)
        return buy

    def _need(self, sku_id: str) -> NeedCounts | None:
        if not self.count_needs:
            return None
        r = self.needs.get(sku_id)
        if r is None:
            r = self.needs[sku_id] = NeedCounts()
        return r

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
        need = self._need(sku)
        if need is not None:
            need.watch(now)
        here = {n.node_id: n for n in ctx.idle}
        spells = self._open.get(sku)
        if spells is None:
            spells = self._open[sku] = {}
        for node_id, o in list(spells.items()):  # this SKU's spells only, in the order they opened
            n = here.get(node_id)
            if n is not None and now - n.idle_for_s == o.start_s:
                continue
            end = o.last_seen_s + max(0, min(now - o.last_seen_s, period)) / 2  # reused between two looks
            self._pool(o.pool_id).add(max(0.0, end - o.start_s), reused=True)  # >= 0 on a clock stepped back
            del spells[node_id]
            if need is not None:
                need.add(now, 1)
        for n in ctx.idle:
            seen = spells.get(n.node_id)
            if seen is None:
                spells[n.node_id] = _Open(n.pool_id, now - n.idle_for_s, now)
            else:
                seen.last_seen_s = now

    def _count(self, reason: str, k: int) -> None:
        if k:
            self.held[reason] = self.held.get(reason, 0) + k
