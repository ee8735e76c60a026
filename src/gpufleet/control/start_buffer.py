"""A warm buffer of free nodes held for training that arrives: the ``start_buffer`` decision.

A job that arrives when no node of its SKU has room waits for a node to start (minutes); at a tight fleet that is
a few percent of the jobs, enough to put the 95th percentile of the training queue wait at a node start. The usual
remedy in a cluster is over-provisioning: placeholder pods of a negative priority that hold a node or two free, so
that real pods preempt them and start at once while the autoscaler brings up the next node (Cluster Autoscaler's
and Karpenter's documented pattern). Held always it pays idle nodes for every hour; this rule holds them only while
the objective is at risk.

The objective is the user's and the fleet's: ``objective`` of the training jobs start within ``within_s`` seconds
of arriving (by default 95 % within a minute: a p95 training queue wait of at most 60 s over every job of the
fleet, as the loop's report reads it). Each hour the rule reads, per SKU, the jobs that arrived over the last
``window_h`` hours and those of them that started later than ``within_s`` (or still wait past it), and steps its
buffers (whole nodes of free GPUs, on tiers every job may use) by one node in all: up while the fleet's late share
is above ``setpoint`` x the share the objective allows, on the SKU where a node buys the most late starts per
dollar (its late jobs over what one of its nodes costs an hour, below ``max_nodes``), down while the share is below
half of that, on the SKU where a node buys the fewest. A cheap SKU with many small late jobs is thus warmed before
an expensive one whose late jobs are few. The world holds that many nodes' GPUs free per SKU: it keeps idle nodes
from scale-down and launches the missing ones.

With ``spot`` (gpufleet's loop), a SKU that has spot capacity is read as two lanes (keys :func:`spot_lane`): the
jobs that may not use spot, whose buffer is held on the tiers every job may use and priced on demand, and
checkpointed training (the jobs that may use spot, which placement sends to spot first), whose buffer is held on
spot nodes and priced at spot. Each job counts once, in its lane; the fleet's late share is the same. A spot node
costs a fifth (H100, H200) to two fifths (A100, L40S) of an on-demand one in the catalog, so the same late
starts per node-dollar warm the spot lane first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

REASON = "start_buffer"
SPOT_LANE = "@spot"  # the suffix of a SKU's spot lane among the rule's keys


def spot_lane(sku_id: str) -> str:
    """The key of ``sku_id``'s spot lane (its checkpointed training, held on spot nodes)."""
    return sku_id + SPOT_LANE


def lane_sku(key: str) -> tuple[str, bool]:
    """The SKU of a key of the rule, and whether it is the SKU's spot lane."""
    return (key.removesuffix(SPOT_LANE), True) if key.endswith(SPOT_LANE) else (key, False)


@dataclass(frozen=True, slots=True)
class BufferDecision:
    """Whole nodes of free GPUs to hold for a SKU, the late share it read, and why."""

    nodes: int
    late_share: float
    reason: str


@dataclass(frozen=True, slots=True)
class LateReading:
    """One lane's hour for the rule (a SKU, or its spot lane): training jobs of the window, those that started
    late, and what a node of the lane costs an hour (on demand, or spot for a spot lane: the price of holding one
    free)."""

    arrived: int
    late: int
    node_usd_h: float


@dataclass(slots=True)
class StartBuffer:
    """The ``start_buffer`` decision (module docstring). It keeps each SKU's last decision between calls (the step
    starts from it; :meth:`nodes` and :meth:`last` read it)."""

    within_s: int = 60
    objective: float = 0.95
    setpoint: float = 0.8
    window_h: int = 6
    max_nodes: int = 1
    top_up_at: float = 0.0
    spot: bool = False  # read a SKU with spot capacity as two lanes (module docstring)
    _last: dict[str, BufferDecision] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.objective < 1.0:
            raise ValueError("objective must be in (0, 1)")
        if not 0.0 < self.setpoint <= 1.0:
            raise ValueError("setpoint must be in (0, 1]")
        if self.within_s < 0 or self.window_h < 1 or self.max_nodes < 0 or not 0.0 <= self.top_up_at <= 1.0:
            raise ValueError("within_s >= 0, window_h >= 1, max_nodes >= 0 and 0 <= top_up_at <= 1 are required")

    @property
    def aim(self) -> float:
        """The late share the rule steers under: ``setpoint`` x the share the objective allows."""
        return self.setpoint * (1.0 - self.objective)

    def decide(self, readings: Mapping[str, LateReading]) -> dict[str, BufferDecision]:
        """The buffers after an hour, from each SKU's reading (a SKU with a buffer and no reading counts as one
        without jobs): one node more or less in all (module docstring), the decision per SKU kept and returned."""
        for sku_id, r in readings.items():
            if r.arrived < 0 or not 0 <= r.late <= r.arrived or not r.node_usd_h > 0:
                raise ValueError(f"{sku_id}: need 0 <= late <= arrived and a positive node price")
        skus = sorted(set(readings) | set(self._last))
        got = {k: readings.get(k, LateReading(0, 0, 1.0)) for k in skus}
        arrived = sum(r.arrived for r in got.values())
        late = sum(r.late for r in got.values())
        share = late / arrived if arrived else 0.0
        now = {k: self.nodes(k) for k in skus}
        worth = {k: got[k].late / got[k].node_usd_h for k in skus}  # late starts a node-dollar of the SKU meets
        step = ""
        if share > self.aim:
            up = [k for k in skus if now[k] < self.max_nodes and got[k].late > 0]
            if up:
                step = max(up, key=lambda k: (worth[k], k))
                now[step] += 1
        elif share < self.aim / 2:
            down = [k for k in skus if now[k] > 0]
            if down:
                step = min(down, key=lambda k: (worth[k], k))
                now[step] -= 1
        fleet = (
            f"{late} of {arrived} training jobs of the last {self.window_h} h started more than {self.within_s} s "
            f"after arriving ({share:.1%}; aim {self.aim:.1%}, for {self.objective:.0%} within {self.within_s} s)"
        )
        out = {}
        for k in skus:
            r, was = got[k], self.nodes(k)
            why = (
                f"{fleet}; {k}: {r.late} of {r.arrived} late, {r.late / r.node_usd_h if r.late else 0:.2f} per "
                f"node-dollar: {'hold' if now[k] else 'no'} {now[k]} node(s) free (was {was}"
                f"{', the step' if k == step else ''})"
            )
            out[k] = self._last[k] = BufferDecision(
                now[k], r.late / r.arrived if r.arrived else 0.0, f"{REASON}: {why}"
            )
        return out

    def launch_nodes(self, want_nodes: int, per: int, free_gpus: int, starting_nodes: int) -> int:
        """Whole nodes to launch for a buffer of ``want_nodes`` nodes of ``per`` GPUs when ``free_gpus`` are free on
        the tiers it counts and ``starting_nodes`` launched for it still start: the missing GPUs in whole nodes, once
        any are missing and at least ``top_up_at`` of a node's GPUs (0: at once, gpufleet's setting; waiting for
        half a node, 0.5, was measured to save 0.3 points of cost on the development worlds but to let lab_dev's
        p95 wait rise from 180 s to 252 s, docs/benchmarks/loop.md "Session 24")."""
        missing = want_nodes * per - free_gpus - starting_nodes * per
        if per <= 0 or missing <= 0 or missing < self.top_up_at * per:
            return 0
        return -(-missing // per)

    def last(self, sku_id: str) -> BufferDecision | None:
        """The last decision for ``sku_id`` (None before the first)."""
        return self._last.get(sku_id)

    def nodes(self, sku_id: str) -> int:
        """The buffer last decided for ``sku_id`` (0 before the first decision)."""
        d = self._last.get(sku_id)
        return d.nodes if d is not None else 0
