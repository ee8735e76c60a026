"""The world's report of queued gangs out of reach (``ScaleDownContext.unreachable_gang_gpus``), read by the node
scaler: a gang that cannot complete from free, starting and launchable nodes does not keep idle nodes up."""

from __future__ import annotations

from gpufleet.autoscale.nodes_payoff import PayoffAwareNodes
from gpufleet.domain.pools import TIER_RANK, Tier
from gpufleet.ports import IdleNode, MoveContext, ScaleDownContext, ScaleUpContext
from gpufleet.sim.builtin import lab_dev_scenario
from gpufleet.sim.kinds import QUEUED
from gpufleet.sim.run import gpufleet_loop
from gpufleet.sim.world import World


class Recording:
    """The loop's node scaler, with what the world reported at each scale-down and what the queue held then."""

    def __init__(self, inner: PayoffAwareNodes) -> None:
        self.inner = inner
        self.min_idle_s = inner.min_idle_s
        self.world: World | None = None
        # ctx, the queued pods (GPUs, tier ranks they may use), GPUs per node
        self.seen: list[tuple[ScaleDownContext, list[tuple[int, tuple[int, ...]]], int]] = []

    def nodes_to_launch(self, ctx: ScaleUpContext) -> int:
        return self.inner.nodes_to_launch(ctx)

    def scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]:
        w = self.world
        assert w is not None
        s = w.sku_ids.index(ctx.sku_id)
        pods = {q for prio in (3, 2, 1, 0) for q in w.queues.queue[s][prio] if w.pods.state[q] == QUEUED}
        queued = [(w.pods.gpus[q], w.pods.tiers(q)) for q in pods]
        self.seen.append((ctx, queued, w.per_node[s]))
        return self.inner.scale_down(ctx)

    def moves(self, ctx: MoveContext) -> list[tuple[int, str]]:
        return self.inner.moves(ctx)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_the_world_reports_gangs_out_of_reach_only_when_nothing_else_is_queued() -> None:
    sc = lab_dev_scenario(days=30, seed=11)
    loop = gpufleet_loop(sc, 11)
    rec = Recording(loop.node_scaler)  # type: ignore[arg-type]
    loop.node_scaler = rec
    w = World(sc, loop)
    rec.world = w
    w.run()
    reported = [(c, q, per) for c, q, per in rec.seen if c.unreachable_gang_gpus > 0]
    assert reported, "no gang out of reach in 30 days of lab_dev seed 11: the test checks nothing"
    for c, queued, _per in rec.seen:
        assert c.unreachable_gang_gpus in (0, c.pending_gpus)  # every queued pod, or none
        assert sum(g for g, _ in queued) == c.pending_gpus
    for c, queued, per in reported:
        assert queued and all(g > per for g, _ in queued)  # only gangs are queued
        for g, tiers in queued:  # none could start on the idle nodes of the tiers it may use
            assert sum(1 for n in c.idle if n.gpus == per and TIER_RANK[Tier(n.tier)] in tiers) < g // per
    assert rec.inner.held.get("pending_gang_out_of_reach", 0) > 0
    idle_seen: list[IdleNode] = [n for c, _, _ in reported for n in c.idle]
    assert idle_seen  # the report came with idle nodes to decide on
