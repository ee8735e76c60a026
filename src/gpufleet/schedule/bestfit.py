"""Baseline in-cluster scheduler: best fit by free GPUs, tiers in fallback order.

The index keeps, per (SKU, tier rank, free GPUs), an insertion-ordered set of node ids, so a decision is a scan
of at most ``tiers x (gpus_per_node + 1)`` buckets: O(1) in the number of nodes. Ties go to the node that has
been in the bucket longest, which is deterministic for a given history.
"""

from __future__ import annotations

from collections.abc import Iterable


class FreeGpuIndex:
    def __init__(self, n_skus: int, n_tiers: int, max_gpus_per_node: int = 8) -> None:
        self.n_tiers = n_tiers
        self.max_gpus = max_gpus_per_node
        self.version = 0  # bumped on every change: a cache of anything derived from the index keys on it
        self._b: list[list[list[dict[int, None]]]] = [
            [[{} for _ in range(max_gpus_per_node + 1)] for _ in range(n_tiers)] for _ in range(n_skus)
        ]

    def add(self, node: int, sku: int, tier: int, free: int) -> None:
        self._b[sku][tier][free][node] = None
        self.version += 1

    def remove(self, node: int, sku: int, tier: int, free: int) -> None:
        del self._b[sku][tier][free][node]
        self.version += 1

    def move(self, node: int, sku: int, tier: int, old_free: int, new_free: int) -> None:
        buckets = self._b[sku][tier]
        del buckets[old_free][node]
        buckets[new_free][node] = None
        self.version += 1

    def best_fit(self, sku: int, gpus: int, tiers: Iterable[int]) -> int | None:
        """The node with the fewest free GPUs that still fits ``gpus``, trying tiers in the given order."""
        per_sku = self._b[sku]
        for t in tiers:
            buckets = per_sku[t]
            for free in range(gpus, self.max_gpus + 1):
                b = buckets[free]
                if b:
                    return next(iter(b))
        return None

    def whole_nodes(self, sku: int, count: int, gpus_per_node: int, tiers: Iterable[int]) -> list[int] | None:
        """``count`` fully free nodes (for a gang), tiers in order; None if there are not enough."""
        per_sku = self._b[sku]
        out: list[int] = []
        for t in tiers:
            for node in per_sku[t][gpus_per_node]:
                out.append(node)
                if len(out) == count:
                    return out
        return None

    def fitting_classes(self, sku: int, tier: int, gpus: int, top: int) -> tuple[int, ...]:
        """The free-GPU counts in ``gpus..top`` that some node of (``sku``, ``tier``) has now."""
        b = self._b[sku][tier]
        return tuple([k for k in range(gpus, top + 1) if b[k]])

    def iter_with_free(self, sku: int, tier: int, free: int) -> Iterable[int]:
        """The nodes with exactly ``free`` GPUs free, oldest first (a view: do not change the index meanwhile)."""
        return iter(self._b[sku][tier][free])

    def first_with_free(self, sku: int, tier: int, free: int) -> int:
        """The node that has been in bucket ``free`` longest (the bucket must not be empty)."""
        return next(iter(self._b[sku][tier][free]))

    def nodes_with_free(self, sku: int, tier: int, free: int) -> list[int]:
        return list(self._b[sku][tier][free])

    def free_nodes(self, sku: int, tier: int, gpus_per_node: int) -> int:
        return len(self._b[sku][tier][gpus_per_node])
