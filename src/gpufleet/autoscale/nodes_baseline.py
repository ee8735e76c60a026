"""Baseline node scale-down, shaped like Kubernetes Cluster Autoscaler: a node unneeded for a while goes."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from gpufleet.ports import MoveContext, ScaleDownContext, ScaleUpContext, within_buffer


@mypyc_attr(allow_interpreted_subclasses=True)  # an extension point: a user's node scaler may start from it
class IdleTimeoutScaleDown:
    """Terminate launched nodes that have been idle for ``unneeded_s`` (CA's scale-down-unneeded-time, 10 min),
    unless work is queued for the SKU (it may want the node)."""

    def __init__(self, unneeded_s: int = 600) -> None:
        self.unneeded_s = unneeded_s
        self.min_idle_s = unneeded_s

    def nodes_to_launch(self, ctx: ScaleUpContext) -> int:
        """The foundation's scale-up: every node the pending pod asks for (a gang's whole count)."""
        return ctx.need_nodes

    def scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]:
        if ctx.pending_gpus > 0:
            return []
        return within_buffer(
            ctx, [(n.node_id, "idle_past_unneeded_time") for n in ctx.idle if n.idle_for_s >= self.unneeded_s]
        )

    def moves(self, ctx: MoveContext) -> list[tuple[int, str]]:
        """Cluster Autoscaler moves pods only off under-utilized nodes it removes; a gang's full nodes stay."""
        return []
