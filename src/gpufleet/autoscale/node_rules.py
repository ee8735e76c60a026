"""Pure node-count rules of gpufleet's cluster autoscaler (no state, no I/O), used through the ``NodeScaler`` port.

- :func:`shortfall_nodes` (scale-up): launch only the nodes that pending work cannot get from nodes that are
  already free or already starting. Kubernetes Cluster Autoscaler does the same for plain pods (it filters out
  pending pods that fit on existing nodes before it estimates new ones); for a gang the whole-node count matters,
  because a gang waits until all of its members fit at once. Nodes whose running work reports it will end
  before a new node would be ready count too: waiting for them is never slower than a launch (a node takes
  ``node_start_s`` to start) and costs nothing.
- :func:`rent_or_buy_hold_s` (scale-down): how long to keep an idle launched node before terminating it. Keeping
  it costs its price per second ("rent"); terminating it and relaunching when work comes back costs the billed
  start time plus the delay of the work that waits for that start ("buy"). The deterministic ski-rental rule
  holds for exactly the buy cost expressed in rent time, which is never worse than twice the cost of the best
  decision made knowing the future (2-competitive), whatever the gap until the next need. The wait is valued
  at the price of capacity had without waiting (on-demand), so a cheap node (spot, secondary) is held longer
  in its own time than an on-demand one: its rent is cheaper per second than the wait it saves.
- :func:`expected_use_holds` (scale-down, several idle nodes): the ski-rental hold above prices one idle node
  alone; with ``k`` idle nodes and fresh-node needs arriving at rate ``lambda``, the ``j``-th node to be reused
  waits ``j / lambda`` on average, so holding it pays only while ``j < lambda x buy`` (rent until use against the
  relaunch it saves); ``lambda x buy`` is estimated by the caller from the needs seen lately (the node scaler:
  per ``buy`` seconds, over the last few of them). The nodes are ranked cheapest first, and a node counts ahead of
  another only if it can host every pod the other can (a spot node hosts checkpointed training only).
- :func:`moves_to_reserved` (consolidation): restart a long checkpointed gang from its last checkpoint on whole
  reserved nodes that have stood idle, instead of paying its launched nodes for the rest of its run. A planned
  multi-week run that arrived when reserved capacity was short otherwise stays on on-demand nodes until a node
  failure happens to restart it (docs/benchmarks/cluster-autoscale.md, "Cost spread").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from gpufleet.ports import RunningOnLaunched

MOVE_REASON = "long_run_to_idle_reserved"


def shortfall_nodes(need_nodes: int, free_whole_nodes: int, starting_nodes: int, freeing_nodes: int = 0) -> int:
    """Nodes to launch for work that needs ``need_nodes`` whole nodes, given free, starting and freeing ones.

    ``freeing_nodes``: busy nodes whose work is expected to end before a launched node would be ready; the
    pending work starts no later on them than on a new node, so a launch for them buys nothing (all counts >= 0).
    """
    if min(need_nodes, free_whole_nodes, starting_nodes, freeing_nodes) < 0:
        raise ValueError("node counts must be >= 0")
    return max(0, need_nodes - free_whole_nodes - starting_nodes - freeing_nodes)


def rent_or_buy_hold_s(
    node_start_s: float, min_billing_s: float = 0.0, delay_weight: float = 1.0, wait_price_ratio: float = 1.0
) -> float:
    """Idle time after which terminating a node is the ski-rental choice (the buy cost in seconds of its price).

    buy = ``node_start_s`` billed while a replacement starts + ``delay_weight`` x ``node_start_s`` of wait of the
    work that needs it, priced at ``wait_price_ratio`` x the node's price (1.0 with ``delay_weight`` 1: a waiting
    GPU-second is worth a billed one of this node) + the part of a minimum billing period a short-lived
    replacement pays for nothing (at most ``min_billing_s``).
    """
    if min(node_start_s, min_billing_s, delay_weight, wait_price_ratio) < 0:
        raise ValueError("node_start_s, min_billing_s, delay_weight and wait_price_ratio must be >= 0")
    return node_start_s + delay_weight * wait_price_ratio * node_start_s + min_billing_s


class HoldCandidate(NamedTuple):
    """An idle launched node as :func:`expected_use_holds` sees it."""

    price_usd_per_gpu_h: float
    idle_for_s: float
    buy_s: float  # its rent-or-buy break-even (:func:`rent_or_buy_hold_s`)
    checkpointed_only: bool  # it hosts checkpointed training only (a spot node)
    # fresh whole nodes the SKU's work is expected to need within ``buy_s`` (None: unknown)
    expected_needs: float | None = None


def expected_use_holds(nodes: Sequence[HoldCandidate]) -> list[bool]:
    """Which idle nodes to hold on (one bool per node, in the given order).

    Every node is held at most its own break-even (``idle_for_s < buy_s``, the 2-competitive ski-rental rule).
    With ``expected_needs`` (fresh whole nodes the SKU's work is expected to need within the node's ``buy_s``) a
    node is held only while fewer held nodes than that come before it: with needs arriving at rate ``r`` the
    ``j``-th node to be reused waits ``j / r`` on average, and holding it that long costs less than the relaunch it
    saves only if ``j / r < buy_s``, i.e. ``j < r x buy_s``. Order: cheapest first, then the most recently idle;
    a node comes before another only if it can host every pod the other can (a checkpointed-only node never comes
    before one that hosts anything). ``expected_needs`` None: the break-even alone decides.
    """
    if any(n.idle_for_s < 0 or n.buy_s < 0 or (n.expected_needs or 0.0) < 0 for n in nodes):
        raise ValueError("idle_for_s, buy_s and expected_needs must be >= 0")
    keep = [n.idle_for_s < n.buy_s for n in nodes]
    held = [i for i, k in enumerate(keep) if k]
    capped = capped_holds(
        [nodes[i].price_usd_per_gpu_h for i in held],
        [nodes[i].idle_for_s for i in held],
        [nodes[i].checkpointed_only for i in held],
        [nodes[i].expected_needs for i in held],
    )
    for i, k in zip(held, capped, strict=True):
        keep[i] = k
    return keep


def cap_can_bind(held: int, lowest_need: float | None) -> bool:
    """Whether the cap of :func:`capped_holds` can let go any of ``held`` nodes whose smallest expected need is
    ``lowest_need`` (None: none has one). A node is let go only if at least its need of held nodes come before it,
    and at most ``held - 1`` do."""
    return lowest_need is not None and held - 1 >= lowest_need


def capped_holds(
    prices: Sequence[float],
    idle_for_s: Sequence[float],
    checkpointed_only: Sequence[bool],
    expected_needs: Sequence[float | None],
) -> list[bool]:
    """The need cap of :func:`expected_use_holds` on nodes that all pass their break-even (parallel sequences, one
    entry per node): which to keep. When no cap can bind (:func:`cap_can_bind`: fewer nodes than the smallest need
    plus one) every node stays and nothing is ranked; otherwise one pass over the nodes cheapest first, then the
    most recently idle (ties: the given order)."""
    n = len(prices)
    lowest = min((e for e in expected_needs if e is not None), default=None)
    if not cap_can_bind(n, lowest):
        return [True] * n
    keep = [True] * n
    held_any = 0  # held nodes so far that host any pod
    held_ckpt = 0  # held nodes so far that host checkpointed training only
    for i in sorted(range(n), key=lambda i: (prices[i], idle_for_s[i], i)):
        ckpt = checkpointed_only[i]
        ahead = held_any + held_ckpt if ckpt else held_any
        e = expected_needs[i]
        if e is not None and ahead >= e:
            keep[i] = False
        elif ckpt:
            held_ckpt += 1
        else:
            held_any += 1
    return keep


def moves_to_reserved(
    running: Sequence[RunningOnLaunched],
    reserved_idle_s: Sequence[int],
    min_left_s: int = 86_400,
    min_idle_s: int = 3_600,
    max_redo_s: int = 900,
) -> list[tuple[int, str]]:
    """Runs to restart on free reserved nodes, longest-paying first, as ``(pod id, reason)``.

    A run qualifies if it is a gang, reports at least ``min_left_s`` left (the launched nodes it frees would have
    billed that long) and redoes at most ``max_redo_s`` of work (it moves just after a checkpoint). Only
    reserved nodes idle for at least ``min_idle_s`` count (slack, not the gap between two jobs), and a run moves
    only if all of its launched nodes fit on them; the runs chosen never need more nodes than that count.
    """
    if min(min_left_s, min_idle_s, max_redo_s) < 0 or any(s < 0 for s in reserved_idle_s):
        raise ValueError("times must be >= 0")
    slack = sum(1 for s in reserved_idle_s if s >= min_idle_s)
    out: list[tuple[int, str]] = []
    for r in sorted(running, key=lambda r: (-r.reported_left_s * r.launched_nodes, r.pod_id)):
        if not r.gang or r.launched_nodes <= 0 or r.launched_nodes > slack:
            continue
        if r.reported_left_s < min_left_s or r.redo_s > max_redo_s:
            continue
        slack -= r.launched_nodes
        out.append((r.pod_id, MOVE_REASON))
    return out
