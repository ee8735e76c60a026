"""A seeded synthetic fleet for metering: what ``gpufleet bench cost`` times and the web demo shows.

8-GPU H100 nodes in three pools (60 % reserved, 30 % on-demand, 10 % spot) run back-to-back jobs of random
length with gaps; every GPU reports one utilization sample per bucket (as DCGM does), unheld devices with
allocation -1. Randomness comes from ``np.random.default_rng(seed)`` only; prices from the injected catalog.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from gpufleet.cost.model import PARTS_PER_GPU, AllocationSpan, CapacityBlock, UsageColumns
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.money import price_to_uusd
from gpufleet.domain.pools import Tier
from gpufleet.ports import PriceCatalog

GPUS_PER_NODE = 8
TEAMS = 40
TENANTS_PER_TEAM = 3
FEATURES = 25


@dataclass(frozen=True, slots=True)
class SyntheticFleet:
    capacity: list[CapacityBlock]
    allocations: list[AllocationSpan]
    usage: UsageColumns
    t0_s: int
    t1_s: int


def _pool_of(node: int, n_nodes: int) -> tuple[str, Tier, str]:
    """60 % of nodes reserved, 30 % on-demand, 10 % spot."""
    if node < 0.6 * n_nodes:
        return "aws/us-east-1/h100_80gb/reserved", Tier.RESERVED, "reserved_1y"
    if node < 0.9 * n_nodes:
        return "aws/us-east-1/h100_80gb/on_demand", Tier.ON_DEMAND, "on_demand"
    return "nebius/eu-north1/h100_80gb/spot", Tier.SPOT, "spot"


def make_fleet(gpus: int, days: int, step_s: int, seed: int, *, prices: PriceCatalog) -> SyntheticFleet:
    """Build the seeded synthetic fleet (H100 nodes priced from ``prices``)."""
    if gpus % GPUS_PER_NODE:
        raise ValidationError("gpus", f"must be a multiple of {GPUS_PER_NODE}")
    rng = np.random.default_rng(seed)
    n_nodes = gpus // GPUS_PER_NODE
    n_buckets = days * 86_400 // step_s
    t0 = 1_767_225_600  # 2026-01-01T00:00Z
    t1 = t0 + n_buckets * step_s
    price = prices.list_price("h100_80gb")
    if price is None:
        raise ValidationError("prices", "the price catalog does not list h100_80gb")
    capacity: dict[str, CapacityBlock] = {}
    allocations: list[AllocationSpan] = []
    cap = gpus * n_buckets
    b_col = np.empty(cap, dtype=np.int32)
    a_col = np.empty(cap, dtype=np.int32)
    u_col = np.empty(cap, dtype=np.float32)
    fill = 0
    node_gpus: dict[str, int] = defaultdict(int)
    for node in range(n_nodes):
        pool_id, tier, price_key = _pool_of(node, n_nodes)
        node_gpus[pool_id] += GPUS_PER_NODE
        capacity[pool_id] = CapacityBlock(
            pool_id, pool_id, tier, "h100_80gb", node_gpus[pool_id], t0, t1, price_to_uusd(getattr(price, price_key))
        )
        owner = np.full(n_buckets, -1, dtype=np.int32)
        base = np.zeros(n_buckets, dtype=np.float32)
        k = int(rng.integers(0, 24))  # first job starts within two hours
        while k < n_buckets:
            length = int(rng.exponential(2 * 86_400 / step_s)) + 1
            end = min(k + length, n_buckets)
            j = len(allocations)
            team = int(rng.integers(0, TEAMS))
            allocations.append(
                AllocationSpan(
                    f"alloc-{j}", f"job-{j}", f"team-{team}", f"tenant-{team}-{int(rng.integers(0, TENANTS_PER_TEAM))}",
                    f"ns-{team}", f"feature-{int(rng.integers(0, FEATURES))}", pool_id, "h100_80gb",
                    GPUS_PER_NODE * PARTS_PER_GPU, t0 + k * step_s, t0 + end * step_s,
                )
            )  # fmt: skip
            owner[k:end] = j
            # one job in ten holds its GPUs near-idle (a stuck job or a forgotten notebook)
            base[k:end] = rng.beta(2.0, 2.0) if rng.random() >= 0.1 else 0.01
            k = end + int(rng.exponential(6 * 3600 / step_s))  # gap: the node sits idle
        # every GPU reports every bucket, held or not (as dcgm-exporter does); unheld devices carry alloc -1
        buckets = np.arange(n_buckets, dtype=np.int32)
        n = n_buckets
        for _ in range(GPUS_PER_NODE):
            b_col[fill : fill + n] = buckets
            a_col[fill : fill + n] = owner
            noise = rng.standard_normal(n, dtype=np.float32) * (np.float32(0.1) * base + np.float32(0.002))
            u_col[fill : fill + n] = np.clip(base + noise, 0.0, 1.0)
            fill += n
    usage = UsageColumns(t0, step_s, b_col[:fill], a_col[:fill], u_col[:fill])
    return SyntheticFleet(list(capacity.values()), allocations, usage, t0, t1)
