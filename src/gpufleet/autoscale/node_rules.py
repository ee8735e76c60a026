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
  decision made knowing the future (2-competitive), whatever the gap until the next need.
"""

from __future__ import annotations


def shortfall_nodes(need_nodes: int, free_whole_nodes: int, starting_nodes: int, freeing_nodes: int = 0) -> int:
    """Nodes to launch for work that needs ``need_nodes`` whole nodes, given free, starting and freeing ones.

    ``freeing_nodes``: busy nodes whose work is expected to end before a launched node would be ready; the
    pending work starts no later on them than on a new node, so a launch for them buys nothing (all counts >= 0).
    """
    if min(need_nodes, free_whole_nodes, starting_nodes, freeing_nodes) < 0:
        raise ValueError("node counts must be >= 0")
    return max(0, need_nodes - free_whole_nodes - starting_nodes - freeing_nodes)


def rent_or_buy_hold_s(node_start_s: float, min_billing_s: float = 0.0, delay_weight: float = 1.0) -> float:
    """Idle time after which terminating a node is the ski-rental choice (the buy cost in seconds of its price).

    buy = ``node_start_s`` billed while a replacement starts + ``delay_weight`` x ``node_start_s`` of wait of the
    work that needs it (1.0: a waiting GPU-second is worth a billed one) + the part of a minimum billing period a
    short-lived replacement pays for nothing (at most ``min_billing_s``).
    """
    if node_start_s < 0 or min_billing_s < 0 or delay_weight < 0:
        raise ValueError("node_start_s, min_billing_s and delay_weight must be >= 0")
    return (1.0 + delay_weight) * node_start_s + min_billing_s
