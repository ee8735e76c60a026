"""Baseline in-cluster scheduler: best fit by free GPUs, tiers in fallback order.

The index keeps, per (SKU, tier rank, free GPUs), an insertion-ordered set of node ids, so a decision is a scan
of at most ``tiers x (gpus_per_node + 1)`` buckets: O(1) in the number of nodes. Ties go to the node that has
been in the bucket longest, which is deterministic for a given history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import islice


class FreeGpuIndex:
    """Buckets of nodes by (SKU, tier rank, free GPUs); optionally, per SKU, its whole free nodes by rack.

    ``mask(sku, tier)``: bit ``k`` is set iff bucket ``k`` holds a node (kept with every change), so the free-GPU
    classes that fit a pod are one AND. With :meth:`track_racks`, the nodes with all ``whole[sku]`` GPUs free
    are also kept per rack (in the order they entered the bucket), so a gang reads its racks without a scan.
    """

    def __init__(self, n_skus: int, n_tiers: int, max_gpus_per_node: int = 8) -> None:
        self.n_tiers = n_tiers
        self.max_gpus = max_gpus_per_node
        self.version = 0  # bumped on every change: a cache of anything derived from the index keys on it
        self._b: list[list[list[dict[int, None]]]] = [
            [[{} for _ in range(max_gpus_per_node + 1)] for _ in range(n_tiers)] for _ in range(n_skus)
        ]
        self.buckets = self._b  # read-only view for hot paths: buckets[sku][tier][free] holds the nodes, oldest first
        self._mask: list[list[int]] = [[0] * n_tiers for _ in range(n_skus)]
        self.masks = self._mask  # read-only view for hot paths: masks[sku][tier] is mask(sku, tier)
        self._whole: list[int] = [-1] * n_skus  # free count of a whole node per SKU (-1: racks not tracked)
        self._rack_of: Sequence[int] = ()
        self._racks: list[list[dict[int, dict[int, None]]]] = [[{} for _ in range(n_tiers)] for _ in range(n_skus)]
        # racks by how many whole free nodes they hold: count -> racks (a set, as dict keys)
        self._by_count: list[list[dict[int, dict[int, None]]]] = [[{} for _ in range(n_tiers)] for _ in range(n_skus)]

    def track_racks(self, rack_of: Sequence[int], whole: Sequence[int]) -> None:
        """Keep whole free nodes per rack: ``rack_of[node]`` (read when a node enters the whole bucket; the caller
        may extend it as nodes are created), ``whole[sku]`` the GPUs of a node of that SKU. Call before adding."""
        self._rack_of = rack_of
        self._whole = list(whole)

    def _rack_add(self, node: int, sku: int, tier: int) -> None:
        by_rack = self._racks[sku][tier]
        r = self._rack_of[node]
        got = by_rack.get(r)
        if got is None:
            got = by_rack[r] = {}
        n = len(got)
        got[node] = None
        self._recount(sku, tier, r, n, n + 1)

    def _rack_del(self, node: int, sku: int, tier: int) -> None:
        by_rack = self._racks[sku][tier]
        r = self._rack_of[node]
        got = by_rack[r]
        n = len(got)
        del got[node]
        if not got:
            del by_rack[r]
        self._recount(sku, tier, r, n, n - 1)

    def _recount(self, sku: int, tier: int, rack: int, old: int, new: int) -> None:
        by_count = self._by_count[sku][tier]
        if old:
            racks = by_count[old]
            del racks[rack]
            if not racks:
                del by_count[old]
        if new:
            got = by_count.get(new)
            if got is None:
                by_count[new] = {rack: None}
            else:
                got[rack] = None

    def best_whole_rack(self, sku: int, tier: int, need: int) -> int | None:
        """The rack whose whole free nodes fit ``need`` with the fewest to spare, lowest rack id on ties (the best
        fit of :func:`gpufleet.schedule.gang.plan_whole_nodes`); None if no rack holds ``need``. Needs
        :meth:`track_racks`."""
        by_count = self._by_count[sku][tier]
        fits = [k for k in by_count if k >= need]
        if not fits:
            return None
        return min(by_count[min(fits)])

    def fewest_racks(self, sku: int, tier: int, need: int) -> list[int] | None:
        """``need`` whole free nodes from the fewest racks, largest first (lowest rack id on ties), each rack's
        nodes oldest in the bucket first: :func:`gpufleet.schedule.gang.plan_whole_nodes`'s ``cluster`` answer,
        read off the racks by count (at most ``gpus per node`` counts, sorted; the racks of a count sorted only
        when reached) instead of sorting every rack. None if the tier holds fewer. Needs :meth:`track_racks`."""
        by_count = self._by_count[sku][tier]
        racks = self._racks[sku][tier]
        out: list[int] = []
        for k in sorted(by_count, reverse=True):
            for r in sorted(by_count[k]):
                out.extend(islice(racks[r], need - len(out)))
                if len(out) >= need:
                    return out
        return None

    def add(self, node: int, sku: int, tier: int, free: int) -> None:
        self._b[sku][tier][free][node] = None
        self._mask[sku][tier] |= 1 << free
        if free == self._whole[sku]:
            self._rack_add(node, sku, tier)
        self.version += 1

    def remove(self, node: int, sku: int, tier: int, free: int) -> None:
        b = self._b[sku][tier][free]
        del b[node]
        if not b:
            self._mask[sku][tier] &= ~(1 << free)
        if free == self._whole[sku]:
            self._rack_del(node, sku, tier)
        self.version += 1

    def move(self, node: int, sku: int, tier: int, old_free: int, new_free: int) -> None:
        buckets = self._b[sku][tier]
        b = buckets[old_free]
        del b[node]
        buckets[new_free][node] = None
        masks = self._mask[sku]
        if b:
            masks[tier] |= 1 << new_free
        else:
            masks[tier] = (masks[tier] & ~(1 << old_free)) | (1 << new_free)
        whole = self._whole[sku]
        if old_free == whole:
            self._rack_del(node, sku, tier)
        elif new_free == whole:
            self._rack_add(node, sku, tier)
        self.version += 1

    def mask(self, sku: int, tier: int) -> int:
        """Bit ``k`` set iff some node of (``sku``, ``tier``) has exactly ``k`` GPUs free."""
        return self._mask[sku][tier]

    def tracks_racks(self, sku: int, whole: int) -> bool:
        return self._whole[sku] == whole

    def whole_by_rack(self, sku: int, tier: int) -> Mapping[int, Mapping[int, None]]:
        """Rack -> its whole free nodes (oldest in the bucket first), racks with none left out (a view: read
        only, do not change the index meanwhile). Needs :meth:`track_racks`."""
        if self._whole[sku] < 0:
            raise ValueError("whole_by_rack needs track_racks")
        return self._racks[sku][tier]

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
