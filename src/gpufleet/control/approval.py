"""Baseline approval: auto-approve under the spend threshold; above it, a simulated pair of approvers.

The pair is one FinOps admin and one ML-platform admin (two distinct people); each takes a random time to
respond and may reject. Randomness comes from the generator passed in.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from gpufleet.domain.reservations import approvals_required
from gpufleet.ports import ApprovalDecision


class SimulatedApprovers:
    def __init__(
        self,
        rng: np.random.Generator,
        *,
        approve_probability: float = 0.95,
        min_delay_s: int = 4 * 3600,
        max_delay_s: int = 3 * 86400,
    ) -> None:
        self.rng = rng
        self.approve_probability = approve_probability
        self.min_delay_s = min_delay_s
        self.max_delay_s = max_delay_s

    def decide(self, est_cost_usd: Decimal, threshold_usd: Decimal, reservation_id: str) -> ApprovalDecision:
        n = approvals_required(est_cost_usd, threshold_usd)
        if n == 1:
            return ApprovalDecision(1, ("auto",), True, 0, "under_threshold_auto_approved")
        delays = self.rng.integers(self.min_delay_s, self.max_delay_s, size=2)
        votes = self.rng.random(2) < self.approve_probability
        approved = bool(votes.all())
        reason = "dual_approval_granted" if approved else "dual_approval_rejected"
        return ApprovalDecision(2, ("finops_admin:sim", "ml_platform_admin:sim"), approved, int(delays.max()), reason)
