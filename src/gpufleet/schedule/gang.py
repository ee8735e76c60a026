"""Gang scheduling: a multi-node job is placed all-or-nothing, preferring one topology domain.

Topology is data: every node row has an ``nvlink_domain`` and a ``rack`` id (see :class:`NodeTable`).
The planner tries the tightest level first (one NVLink domain, then one rack, then anywhere, unless the
gang *requires* a level) and inside a level the domain that fits with the least spare GPUs (best fit),
so big empty domains stay free for big gangs. Workers go to the fullest node that fits (best fit). A caller may
restrict the gang to a subset of nodes (``within``: e.g. one capacity type, the Kubernetes planner's order).

Contract: on success every worker is allocated on the table; on failure the table is exactly as before
(trial allocations are rolled back) and the reason code says why.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Literal

import numpy as np

from gpufleet.schedule.policies import best_fit_gpus
from gpufleet.schedule.table import NodeTable, PodRequest

Level = Literal["nvlink_domain", "rack", "cluster"]
LEVELS: tuple[Level, ...] = ("nvlink_domain", "rack", "cluster")


@dataclass(frozen=True, slots=True)
class GangRequest:
    """``workers`` must all start together. ``require`` = a level the whole gang must fit inside."""

    name: str
    workers: tuple[PodRequest, ...]
    require: Level | None = None


@dataclass(frozen=True, slots=True)
class GangPlacement:
    name: str
    nodes: tuple[int, ...]  # one per worker, same order
    gpu_slots: tuple[tuple[int, ...], ...]
    level: Level
    domain: int  # domain id at ``level`` (-1 for cluster)
    reason: str = "placed"


@dataclass(frozen=True, slots=True)
class GangInfeasible:
    name: str
    reason: str  # "empty_gang" | "no_domain_fits" | "insufficient_capacity"


def _domain_ids(table: NodeTable, level: Level) -> np.ndarray:
    if level == "nvlink_domain":
        return table.nvlink_domain
    if level == "rack":
        return table.rack
    return np.zeros(table.n_nodes, dtype=np.int32)


def _try_domain(
    table: NodeTable, workers: tuple[PodRequest, ...], allowed: np.ndarray
) -> list[tuple[int, tuple[int, ...]]] | None:
    """Allocate every worker inside ``allowed`` (best fit); roll back and return None if one fails."""
    done: dict[int, tuple[int, tuple[int, ...]]] = {}
    for i in sorted(range(len(workers)), key=lambda k: -workers[k].total_gpu_milli):  # biggest first
        req = workers[i]
        cand = np.flatnonzero(allowed & table.feasible(req))
        if cand.size == 0:
            for k, (node, gpus) in reversed(list(done.items())):
                table.release(node, workers[k], gpus)
            return None
        free = table.gpu_left_milli[cand].sum(axis=1).astype(np.int64) - req.total_gpu_milli
        node = int(cand[int(np.argmin(free))])
        gpus = best_fit_gpus(table, node, req)
        table.allocate(node, req, gpus)
        done[i] = (node, gpus)
    return [done[i] for i in range(len(workers))]


def place_gang(table: NodeTable, gang: GangRequest, within: np.ndarray | None = None) -> GangPlacement | GangInfeasible:
    """Place all workers of ``gang`` or none, only on the nodes where ``within`` (a boolean mask over the table's
    nodes; None: every node) is true. See the module docstring for the preference order."""
    if not gang.workers:
        return GangInfeasible(gang.name, "empty_gang")
    for w in gang.workers:
        w.validate()
    need = sum(w.total_gpu_milli for w in gang.workers)
    levels = LEVELS if gang.require is None else LEVELS[: LEVELS.index(gang.require) + 1]
    for level in levels:
        ids = _domain_ids(table, level).astype(np.int64)
        if gang.require is not None and level != gang.require:  # a narrower domain must also sit inside
            req_ids = _domain_ids(table, gang.require).astype(np.int64)  # one required-level domain
            ids = ids * (int(req_ids.max()) + 1) + req_ids
        domains = np.unique(ids if within is None else ids[within])
        masks = [ids == d if within is None else (ids == d) & within for d in domains]
        spare = np.array([table.gpu_left_milli[m].sum() for m in masks], dtype=np.int64)
        for j in np.argsort(spare - need, kind="stable"):
            if spare[j] < need:
                continue
            got = _try_domain(table, gang.workers, masks[j])
            if got is not None:
                return GangPlacement(
                    gang.name,
                    tuple(n for n, _ in got),
                    tuple(g for _, g in got),
                    level,
                    int(_domain_ids(table, level)[got[0][0]]) if level != "cluster" else -1,
                )
    return GangInfeasible(gang.name, "no_domain_fits" if gang.require else "insufficient_capacity")


def plan_whole_nodes(free_by_domain: Mapping[int, Collection[int]], need: int) -> tuple[list[int], Level] | None:
    """``need`` fully free nodes for a gang of whole-node workers, preferring one topology domain.

    ``free_by_domain`` maps a domain id (e.g. a rack) to its fully free nodes in the caller's tie order (a list,
    or the index's insertion-ordered view). The same preference as :func:`place_gang`: the domain that fits the
    whole gang with the fewest spare nodes (best fit, lowest id on ties); otherwise the fewest domains, largest
    first (level ``cluster``). Returns None if there are fewer than ``need`` free nodes in all. Pure: nothing is
    allocated here.
    """
    if need <= 0:
        return [], "cluster"
    best: int | None = None
    best_len = 0
    for d, nodes in free_by_domain.items():
        n = len(nodes)
        if n >= need and (best is None or n < best_len or (n == best_len and d < best)):
            best, best_len = d, n
    if best is not None:
        return list(islice(free_by_domain[best], need)), "rack"
    out: list[int] = []
    for d in sorted(free_by_domain, key=lambda d: (-len(free_by_domain[d]), d)):
        out.extend(islice(free_by_domain[d], need - len(out)))
        if len(out) == need:
            return out, "cluster"
    return None
