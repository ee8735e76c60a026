"""A warm buffer of free nodes held for training that arrives: the ``start_buffer`` decision.

A job that arrives when no node of its SKU has room waits for a node to start (minutes); at a tight fleet that is
a few percent of the jobs, enough to put the 95th percentile of the training queue wait at a node start. The usual
remedy in a cluster is over-provisioning: placeholder pods of a negative priority that hold a node or two free, so
that real pods preempt them and start at once while the autoscaler brings up the next node (Cluster Autoscaler's
and Karpenter's documented pattern). Held always it pays idle nodes for every hour; this rule holds them only while
the objective is at risk.

The objective is the user's: ``objective`` of the training jobs start within ``within_s`` seconds of arriving (by
default 95 % within a minute, a p95 wait of at most 60 s). Each hour the rule reads, per SKU, the jobs that arrived
over the last ``window_h`` hours and those of them that started later than ``within_s`` (or still wait past it),
and steps its buffer (whole nodes of free GPUs, on tiers every job may use) by one node: up while the late share is
above ``setpoint`` x the share the objective allows, down while it is below half of that, never above
``max_nodes``. The world holds that many nodes' GPUs free: it keeps idle nodes from scale-down and launches the
missing ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

REASON = "start_buffer"


@dataclass(frozen=True, slots=True)
class BufferDecision:
    """Whole nodes of free GPUs to hold for a SKU, the late share it read, and why."""

    nodes: int
    late_share: float
    reason: str


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

    def decide(self, sku_id: str, arrived: int, late: int) -> BufferDecision:
        """The buffer for ``sku_id`` after an hour in which ``late`` of the ``arrived`` jobs of the last
        ``window_h`` hours started later than ``within_s`` (or still wait past it)."""
        if arrived < 0 or not 0 <= late <= arrived:
            raise ValueError("need 0 <= late <= arrived")
        share = late / arrived if arrived else 0.0
        was = self.nodes(sku_id)
        now = was
        if share > self.aim:
            now = min(self.max_nodes, was + 1)
        elif share < self.aim / 2:
            now = max(0, was - 1)
        why = (
            f"{late} of {arrived} jobs of the last {self.window_h} h started more than {self.within_s} s after arriving "
            f"({share:.1%}; aim {self.aim:.1%}, for {self.objective:.0%} within {self.within_s} s): "
            f"{'hold' if now else 'no'} {now} node(s) free (was {was})"
        )
        d = self._last[sku_id] = BufferDecision(now, share, f"{REASON}: {why}")
        return d

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
