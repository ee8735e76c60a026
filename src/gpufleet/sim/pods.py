"""Pods of the simulated world: one table of every pod (training jobs, then serving replicas), the queues they wait
in, and the billing of their running segments.

Parts of :class:`~gpufleet.sim.world.World` that every other part shares: the table holds state only; who changes
it (scheduling, serving, consolidation) is the part's business. Every pod state change goes through
:meth:`PodTable.set_state`, the gate of sim/lifecycle.py.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpufleet.sim.kinds import DONE, PRIO_SERVING, REMOVED, TIERS_ALL, TIERS_NO_SPOT
from gpufleet.sim.lifecycle import POD_NEXT, pod_gate

if TYPE_CHECKING:
    from gpufleet.control.metering import Ledger
    from gpufleet.sim.demand import JobBatch
    from gpufleet.sim.fleet import Fleet
    from gpufleet.sim.scenario import ServingSpec


class PodTable:
    """Every pod as parallel Python lists (fast scalar access in the event loop), indexed by pod id: training jobs
    first (ids ``0 .. n_jobs - 1``, in arrival order), serving replicas appended as the autoscaler adds them."""

    __slots__ = (
        "_end_memos",
        "arrival",
        "ckpt",
        "epoch",
        "first_start",
        "gpus",
        "group",
        "n_jobs",
        "nodes",
        "prio",
        "ready",
        "remaining",
        "seg",
        "serving",
        "sku",
        "start",
        "state",
        "team",
        "tenant_of_team",
        "tier_orders",
        "work",
    )

    def __init__(
        self,
        jobs: JobBatch,
        sku_of_job: list[int],
        tier_orders: Sequence[tuple[tuple[int, ...], tuple[int, ...]]] | None = None,
    ) -> None:
        """``tier_orders``: per SKU, the tier ranks (any other pod, checkpointed training) may use, in the loop's
        order on running nodes (default: the order of reliability, spot only for checkpointed training)."""
        n = len(jobs.arrival_s)
        self.tier_orders: list[tuple[tuple[int, ...], tuple[int, ...]]] = list(tier_orders or [])
        self.n_jobs = n
        self.gpus: list[int] = jobs.gpus.tolist()
        self.sku: list[int] = sku_of_job
        self.prio: list[int] = jobs.priority.tolist()
        self.ckpt: list[int] = jobs.ckpt_s.tolist()
        self.remaining: list[int] = jobs.work_s.tolist()
        self.work: list[int] = jobs.work_s.tolist()
        self.arrival: list[int] = jobs.arrival_s.tolist()
        self.team: list[str] = jobs.team
        self.group: list[str] = jobs.group
        self.serving: list[int] = [-1] * n  # fleet index for serving replicas
        self.state: list[int] = [0] * n
        self.epoch: list[int] = [0] * n
        self.start: list[int] = [0] * n  # start of the current run (checkpoint phase)
        self.seg: list[int] = [0] * n  # start of the current billing segment
        self.first_start: list[int] = [-1] * n
        self.nodes: list[tuple[int, ...]] = [()] * n  # the nodes each pod runs on (immutable)
        self.ready: list[bool] = [False] * n  # serving replicas: past their cold start
        self.tenant_of_team = {t: f"{t}-internal" for t in set(jobs.team)}
        self._end_memos: list[dict[int, Any]] = []

    def forget_on_end(self, memo: dict[int, Any]) -> None:
        """A part's per-pod memo: its entry is dropped when the pod ends (DONE or REMOVED)."""
        self._end_memos.append(memo)

    def set_state(self, pod: int, target: int) -> None:
        """Every pod state change goes through the gate of sim/lifecycle.py (its table, read inline here)."""
        cur = self.state[pod]
        if target not in POD_NEXT[cur]:
            pod_gate(pod, cur, target)  # raises InvalidTransition
        self.state[pod] = target
        if target in (DONE, REMOVED):
            for memo in self._end_memos:
                memo.pop(pod, None)

    def tiers(self, pod: int) -> tuple[int, ...]:
        """Tier ranks the pod may use, in the order placement tries them: spot only for checkpointable training."""
        ckpt = self.ckpt[pod] > 0 and self.serving[pod] < 0
        if self.tier_orders:
            return self.tier_orders[self.sku[pod]][ckpt]
        return TIERS_ALL if ckpt else TIERS_NO_SPOT

    def late_starts(
        self, sku: int, now: int, window_s: int, within_s: int, may_use_spot: bool | None = None
    ) -> tuple[int, int]:
        """Training jobs of ``sku`` that arrived within ``window_s`` before ``now``, and those of them that started
        more than ``within_s`` after arriving or still wait past it (the start buffer's reading). ``may_use_spot``:
        only the checkpointed jobs (True: those that may use spot) or only the others (False); None: all."""
        arrival, n = self.arrival, self.n_jobs
        hi = bisect_right(arrival, now, 0, n)  # jobs are in arrival order
        arrived = late = 0
        for j in range(bisect_right(arrival, now - window_s, 0, hi), hi):
            if self.sku[j] != sku or self.state[j] == 0:
                continue
            if may_use_spot is not None and (self.ckpt[j] > 0) != may_use_spot:
                continue
            arrived += 1
            first = self.first_start[j]
            if (first if first >= 0 else now) - arrival[j] > within_s:
                late += 1
        return arrived, late

    def add_replica(self, fleet: int, spec: ServingSpec, sku: int, now: int) -> int:
        """A new serving replica of fleet ``fleet``, not arrived yet (state NEW): its pod id."""
        pod = len(self.state)
        self.gpus.append(spec.gpus_per_replica)
        self.sku.append(sku)
        self.prio.append(PRIO_SERVING)
        self.ckpt.append(0)
        self.remaining.append(0)
        self.work.append(0)
        self.arrival.append(now)
        self.team.append(spec.team)
        self.group.append(f"serving/{spec.name}")
        self.serving.append(fleet)
        self.state.append(0)
        self.epoch.append(0)
        self.start.append(now)
        self.seg.append(now)
        self.first_start.append(-1)
        self.nodes.append(())
        self.ready.append(False)
        return pod


class WorkQueues:
    """Pods waiting per SKU: queued by priority (admitted, counted as pending demand) or parked (waiting for their
    team's quota, not pending demand: no node is launched for them)."""

    __slots__ = ("parked", "pending_gpus", "queue")

    def __init__(self, n_sku: int) -> None:
        self.queue: list[list[deque[int]]] = [[deque() for _ in range(4)] for _ in range(n_sku)]
        self.pending_gpus = [0] * n_sku
        self.parked: list[deque[int]] = [deque() for _ in range(n_sku)]


class Billing:
    """Charges each pod's running segments to the ledger (the per-segment book the fleet's integrals are checked
    against). Serving replicas bill to their fleet's team and tenant.

    A charge is ``price x GPUs x seconds`` in integer ledger units (exact), and a pool's price never changes, so
    the segments are summed per (team, tenant, workload, pool) as GPU-seconds and written to the ledger when it is
    read (:meth:`flush`): the same totals to the unit, and the ledger's keys in the order of their first charge,
    as charging segment by segment would give (``tests/unit/test_sim_fast_paths.py`` checks both)."""

    def __init__(self, pods: PodTable, fleet: Fleet, per_node: list[int], ledger: Ledger, serving: list[ServingSpec]):
        self.pods = pods
        self.fleet = fleet
        self.per_node = per_node
        self._ledger = ledger
        self.serving_owner = [(s.team, s.tenant, f"serving/{s.name}") for s in serving]
        # (team, tenant, workload, pool index) -> GPU-seconds not yet written to the ledger (insertion-ordered)
        self._gpu_s: dict[tuple[str, str, str, int], int] = {}

    @property
    def ledger(self) -> Ledger:
        """The ledger, with every segment charged so far written to it."""
        self.flush()
        return self._ledger

    def flush(self) -> None:
        """Write the summed GPU-seconds to the ledger (in the order of their first charge) and start again."""
        acc = self._gpu_s
        if not acc:
            return
        pools = self.fleet.pools
        charge = self._ledger.charge
        for (team, tenant, group, pool), gpu_s in acc.items():
            pr = pools[pool]
            charge(
                team=team,
                tenant=tenant,
                workload=group,
                tier=pr.tier_name,
                price_uusd=pr.price_uusd,
                gpus=1,
                seconds=gpu_s,
            )
        acc.clear()

    def charge(self, pod: int, now: int) -> None:
        """Bill the pod's GPUs from the start of its billing segment to ``now`` and open a new segment."""
        p = self.pods
        dt = now - p.seg[pod]
        if dt <= 0:
            return
        p.seg[pod] = now
        g = p.gpus[pod]
        per = self.per_node[p.sku[pod]]
        gpn = g if g <= per else per
        fl = p.serving[pod]
        if fl >= 0:
            team, tenant, group = self.serving_owner[fl]
        else:
            team = p.team[pod]
            tenant, group = p.tenant_of_team[team], p.group[pod]
        nodes = p.nodes[pod]
        n_pool = self.fleet.n_pool
        acc = self._gpu_s
        first = n_pool[nodes[0]]
        if len(nodes) == 1 or all(n_pool[n] == first for n in nodes):  # the common case: one charge per pod
            key = (team, tenant, group, first)
            acc[key] = acc.get(key, 0) + gpn * len(nodes) * dt
            return
        for node in nodes:
            key = (team, tenant, group, n_pool[node])
            acc[key] = acc.get(key, 0) + gpn * dt
