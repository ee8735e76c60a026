"""The controller's writes into the service's store (the inventory sync, the usage meter's hours) on a thread of
their own, so that binding pods never waits on the store.

A store that hangs runs each statement up to its timeout (30 s by default, ``adapters/sql/engine.py``), and one
that is down fails each call: on the binding loop's thread either would stall or stop binding. :class:`StoreLink`
takes what it needs from the loop (an observation; the meter's reading, which is in memory) and hands the store's
work to a :class:`SideWorker`: at most one job of each kind waiting or running, so a sync that falls due while the
last one still hangs is not queued twice. A job that fails is recorded in the controller's audit (``inventory_sync``
or ``usage_metered``, outcome ``failed``, with the error) and the next cadence tries again; the meter keeps the hours
it could not write (``usage.py``: :class:`MeterLoop`).

The store's schema revision is checked (``RevisionGate``, adapters/sql/migrate.py) before the link's first use of
the store and again after each failed job: a controller started while the store was down, or one whose store went
away and came back (restored from an older backup, upgraded by a newer release), refuses to touch a store at another
revision than the one it ships (the job fails, recorded with the revision and the command that fixes it) instead of
writing into it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.cadence import due
from gpufleet.adapters.kubernetes.node_limits import LimitChange, apply_limits, limit_changes, store_capacity
from gpufleet.adapters.kubernetes.side_worker import SideWorker
from gpufleet.adapters.kubernetes.usage import HourWritten, MeterLoop, UsageSink, store_pools
from gpufleet.adapters.sql.migrate import RevisionGate
from gpufleet.control.observation import Observation, ObservedNodePool
from gpufleet.cost.telemetry import TelemetryBatch
from gpufleet.domain.errors import ValidationError


class StoreLink:
    """The leader's inventory sync (every ``sync_every_s``), usage metering (every ``meter_every_s``, 0 = off;
    ``utilization`` reads DCGM from Prometheus, None: not measured; ``gpu_memory`` each pod's peak DCGM GPU memory
    in GB, None: not measured; ``usage_sink`` writes the records) and
    NodePool limits (every ``node_limits_every_s``, 0 = off; node_limits.py) for one cluster of the store at
    ``store_url``, their store work on a :class:`SideWorker`."""

    def __init__(
        self,
        act: Actuator,
        store_url: str,
        cluster: str,
        *,
        sync_every_s: float,
        sku_map: Mapping[str, str] | None = None,
        meter_every_s: float = 0.0,
        utilization: Callable[[int, int, int], TelemetryBatch] | None = None,
        usage_sink: UsageSink | None = None,
        node_limits_every_s: float = 0.0,
        node_pools: Callable[[], Sequence[ObservedNodePool]] | None = None,
        steady: Callable[[], float] | None = None,
        gpu_memory: Callable[[int, int, int], Mapping[tuple[str, str], float]] | None = None,
    ) -> None:
        self.act = act
        self.store_url = store_url
        self.cluster = cluster
        self.sync_every_s = sync_every_s
        self.sku_map = dict(sku_map or {})
        self.syncs = 0
        self._next_sync_s = 0.0
        self.node_limits_every_s = node_limits_every_s if node_pools is not None else 0.0
        self._node_pools = node_pools  # the NodePools whose limits follow the store (their selector's)
        self._next_limits_s = 0.0
        self._engine: Engine | None = None
        self._gate: RevisionGate | None = None
        self.metering: MeterLoop | None = None
        if meter_every_s > 0:
            if usage_sink is None:
                raise ValidationError("usage_sink", "usage metering needs a sink for its records")
            self.metering = MeterLoop(cluster, self.pools, utilization, usage_sink, every_s=meter_every_s,
                                      sku_map=self.sku_map, steady=steady, gpu_memory=gpu_memory)  # fmt: skip
        self.worker = SideWorker("store", self._failed)

    def engine(self) -> Engine:
        if self._engine is None:
            from gpufleet.adapters.sql.engine import make_engine

            self._engine = make_engine(self.store_url)
        return self._engine

    def store(self) -> Engine:
        """The engine, once the store's schema revision is the one this gpufleet ships (checked at the first use
        and after each failed job: DatabaseNotMigrated / DatabaseUnavailable otherwise)."""
        if self._gate is None:
            self._gate = RevisionGate(self.engine())
        self._gate.check()
        return self.engine()

    def pools(self) -> tuple[list[str], dict[tuple[str, str, str], str]]:
        """The store's SKU ids and pools (what the meter names its records' pools from)."""
        with Session(self.store()) as s:
            return store_pools(s)

    def tick(self, now_s: float, observe: Callable[[], Observation]) -> None:
        """From the binding loop (leader only): the meter's reading in memory, and the store's work queued."""
        if due(now_s, self._next_sync_s, self.sync_every_s):
            self._next_sync_s = now_s + self.sync_every_s
            obs = observe()
            self.worker.submit("inventory_sync", lambda: self.sync(obs, now_s))
        if self.node_limits_every_s > 0 and due(now_s, self._next_limits_s, self.node_limits_every_s):
            self._next_limits_s = now_s + self.node_limits_every_s
            self.worker.submit("node_pool_limits", lambda: self.node_limits(now_s))
        meter = self.metering
        if meter is not None and meter.read(now_s, observe):  # on its cadence (its first pools read by the job)
            self.worker.submit("usage_metered", lambda: self.record_hours(meter.write_due(now_s)))

    def sync(self, obs: Observation, now_s: float) -> None:
        """The cluster's inventory into the store now (adapters/kubernetes/inventory.py), one audit record."""
        from gpufleet.adapters.kubernetes.inventory import sync_inventory

        r = sync_inventory(self.store(), self.cluster, obs, sku_map=self.sku_map, now_s=int(now_s))
        self.act.record("inventory_sync", self.cluster, "cadence", "applied", nodes=r.nodes_written,
                        deleted=r.nodes_deleted, pods=r.pods_allocated)  # fmt: skip
        self.syncs += 1

    def node_limits(self, now_s: float) -> list[LimitChange]:
        """The selected NodePools' GPU limits, read from the API server now, set to what the store says for the
        cluster's region (node_limits.py); one audit record ``node_pool_limits`` with what changed and what was left
        alone."""
        assert self._node_pools is not None
        node_pools = self._node_pools()
        with Session(self.store()) as s:
            cap = store_capacity(s, self.cluster, now_s)
        changes, skipped = limit_changes(node_pools, cap, self.sku_map)
        apply_limits(self.act, changes)
        self.act.record("node_pool_limits", self.cluster, "cadence", "applied", changed=len(changes),
                        skipped=dict(skipped))  # fmt: skip
        return changes

    def busy(self) -> dict[str, bool]:
        """Each of the link's job kinds: waiting or running now."""
        return {k: self.worker.busy(k) for k in ("inventory_sync", "usage_metered", "node_pool_limits")}

    def record_hours(self, hours: list[HourWritten]) -> None:
        """One audit record ``usage_metered`` per hour written."""
        for h in hours:
            self.act.record("usage_metered", self.cluster, "hour", "applied", hour=h.start_s,
                            records=h.records, util_unmeasured_gpu_h=round(h.util_unmeasured_gpu_h, 3),
                            undercovered=h.undercovered, unwritten_gpu_h=round(h.unwritten_gpu_h, 3),
                            refused=len(h.refused))  # fmt: skip

    def _failed(self, kind: str, exc: BaseException) -> None:
        if self._gate is not None:
            self._gate.reset()  # the store failed: check its revision again when it answers
        self.act.record(kind, self.cluster, "store_unavailable", "failed", error=f"{type(exc).__name__}: {exc}"[:500])

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Finish the queued work (at most ``timeout_s``) and close the store's connections."""
        ended = self.worker.stop(timeout_s)
        if ended and self._engine is not None:
            self._engine.dispose()
        return ended
