"""A base of secondary-provider nodes under the work that rents launched capacity: the ``secondary_base`` decision.

Where a SKU's secondary provider is cheaper than its on-demand tier but takes hours to deliver a node, placement
launches on demand for queued work (a node in minutes), and the secondary provider is used only when on demand is
at its quota or out of stock. A secondary node held all the time is then a cheaper substitute for the on-demand
GPUs the SKU rents most hours: the newsvendor rule holds the n-th node while its expected use over the last
``window_h`` hours, ``E[min(per, max(0, U - per (n - 1)))]`` with ``U`` the SKU's GPUs in use on its on-demand
and secondary nodes each hour, is at least ``per x secondary / on-demand`` (the share of the hours at which a held
node at the secondary price costs less than renting those GPUs on demand). No setting is tuned: the window is a
week (the hour-of-week cycle) and the threshold is the price ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

REASON = "secondary_base"


@dataclass(frozen=True, slots=True)
class BaseDecision:
    """Secondary nodes to hold (0 = none) and why; ``need_gpus``: the expected use, in GPUs over the window, the
    last node held had to reach (``per x secondary / on-demand``)."""

    nodes: int
    need_gpus: float
    reason: str


@dataclass(frozen=True, slots=True)
class SecondaryBase:
    """The ``secondary_base`` decision (module docstring); ``window_h``: the hours of use it reads."""

    window_h: int = 7 * 24

    def decide(
        self,
        in_use_gpus: Sequence[float],
        per: int,
        *,
        secondary_usd: float,
        on_demand_usd: float,
        max_nodes: int,
    ) -> BaseDecision:
        """Secondary nodes to hold, with the reason (the simulator launches the missing ones, the service reports
        it): 0 before ``window_h`` hours are observed, when the secondary provider is not cheaper than on demand, or
        when it has no room; else the largest ``n <= max_nodes`` whose n-th node's expected use over the last
        ``window_h`` hours reaches ``per x secondary / on-demand`` GPUs."""
        need = per * secondary_usd / on_demand_usd if on_demand_usd > 0 and per > 0 else 0.0
        n = 0
        if len(in_use_gpus) < self.window_h or per <= 0:
            why = f"{len(in_use_gpus)} of the {self.window_h} hours of launched use it reads are observed"
        elif not 0 < secondary_usd < on_demand_usd:
            why = f"the secondary provider (${secondary_usd:.2f}/GPU-h) is not cheaper than on demand"
        elif max_nodes <= 0:
            why = "the secondary provider has no room (no quota stored)"
        else:
            u = np.asarray(in_use_gpus[-self.window_h :], dtype=np.float64)
            while n < max_nodes and float(np.clip(u - per * n, 0.0, per).mean()) >= need:
                n += 1
            why = (
                f"each of them was in use for at least {need:.2f} of its {per} GPUs on average over the last "
                f"{self.window_h} hours of on-demand + secondary use (break-even at ${secondary_usd:.2f} / "
                f"${on_demand_usd:.2f} per GPU-hour); room for {max_nodes}"
            )
        return BaseDecision(n, need, f"{REASON}: hold {n} secondary nodes: {why}")
