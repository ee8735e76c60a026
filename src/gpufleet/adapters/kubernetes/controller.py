"""``gpufleet controller``: the Kubernetes world of the loop. Observe -> decide (control/) -> act -> record.

Each tick: the :class:`ClusterView` gives an Observation; :class:`BindingPlanner` (control/) returns binds
with reason codes (serving replicas spread over nodes with the loop's ``ReplicaSpread``, ``replica_spread``); the :class:`Actuator` sends them through the Binding API on a pool of ``bind_workers``
threads (one pooled HTTPS connection each). A refused bind (409: the pod was bound meanwhile; 404: deleted)
gives its resources back to the planner, so nothing is double-booked; transient errors are retried by the
Actuator. A gang whose binds partly fail is rolled back (its bound members deleted, reason
``gang_rollback``) so it never runs partly. On their own cadences the leader also drains underused nodes
(``consolidate_every_s``), preempts lower-priority work for pods and gangs that do not fit (``preemption``,
:meth:`Controller._preempt`), syncs inventory into the store (``sync_every_s``) and scales opted-in serving
Deployments with gpufleet's replica policy from their Prometheus request rates (``scale_every_s``,
:meth:`Controller.maybe_scale`) and releases the idle launched GPU nodes the loop's node scaler lets go
(``release_every_s``, :meth:`Controller.maybe_release`), topping up the loop's start buffer with placeholder
pods there (``buffer_pods``, control/buffer_pods.py).

Only the Lease holder acts (:class:`LeaderElector`); a dry-run controller never takes the Lease and writes
nothing. :meth:`Controller.stop` (SIGTERM/SIGINT in the CLI) ends the loop after the current tick, waits for
binds in flight, and releases the Lease.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.bufferpods import apply_buffer_pods
from gpufleet.adapters.kubernetes.cadence import due
from gpufleet.adapters.kubernetes.consolidation import drain_round, moves_last_hour
from gpufleet.adapters.kubernetes.controller_config import (
    ControllerConfig,
    loop_node_scaler,
    loop_replica_spread,
    loop_start_buffer,
)
from gpufleet.adapters.kubernetes.health import ControllerHealth, HealthServer
from gpufleet.adapters.kubernetes.lease import LeaderElector
from gpufleet.adapters.kubernetes.move_ledger import MoveLedger
from gpufleet.adapters.kubernetes.node_limits import selected_node_pools
from gpufleet.adapters.kubernetes.product_check import ProductCheck
from gpufleet.adapters.kubernetes.reclaim import apply_preemption, apply_release, mark_idle
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.adapters.kubernetes.scaling import DeploymentScaling
from gpufleet.adapters.kubernetes.store_link import StoreLink
from gpufleet.adapters.kubernetes.usage import HourWritten, MeterLoop, UsageSink, cluster_id_problem
from gpufleet.adapters.kubernetes.view import ClusterView
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry, valid_label_name
from gpufleet.control.binding import BindingPlan, BindingPlanner, PodBind, Unschedulable
from gpufleet.control.buffer_pods import BufferPods, plan_buffer_pods
from gpufleet.control.node_release import NodeRelease, NodeReleasePlanner, NodeUncordon
from gpufleet.control.observation import Observation
from gpufleet.control.preempting import NoPreempt, PreemptConfig, PreemptDecision
from gpufleet.control.reclaim import plan_reclaim
from gpufleet.control.replicas import ScalePlan
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.errors import ValidationError

__all__ = ["Controller", "ControllerConfig", "loop_node_scaler", "loop_replica_spread", "loop_start_buffer"]


class Controller:
    def __init__(
        self,
        kube: Kube,
        cfg: ControllerConfig,
        *,
        clock: Callable[[], float] = time.time,
        usage_sink: UsageSink | None = None,
    ) -> None:
        self.kube = kube
        self.cfg = cfg
        self.clock = clock
        identity = cfg.identity or f"{socket.gethostname()}-{os.getpid()}-{id(self):x}"
        self.identity = identity
        self.view = ClusterView(kube, resync_s=cfg.resync_s, clock=clock)
        hold_s = cfg.checkpoint_timeout_s + 600.0  # the handshake, then the evictions and the pods' grace
        pcfg = PreemptConfig(
            cfg.preemption, cfg.preempt_grace_s, cfg.node_start_s, hold_s, cfg.max_preemptions_per_tick
        )
        self._new_planner = functools.partial(BindingPlanner, scheduler_name=cfg.scheduler_name, policy=cfg.policy,
                                              tier_order=cfg.tier_order, preempt_cfg=pcfg,
                                              spread=cfg.replica_spread)  # fmt: skip
        self.planner = self._new_planner()
        self._terms: dict[str, int] = {}  # the Lease term each part's memory belongs to (_new_term)
        self.act = Actuator(kube, dry_run=cfg.dry_run, audit_path=cfg.audit_path, events=cfg.events, clock=clock)
        self.product_check = ProductCheck(BUILTIN_PRICE_CATALOG.sku_ids(), dict(cfg.sku_map))  # relabelled nodes
        self.health = ControllerHealth(self._health_probe, stale_s=cfg.health_stale_s)  # served by start() on a port
        self.health_server: HealthServer | None = None
        self.act.on_record = self.health.record
        self.elector = LeaderElector(
            kube, cfg.namespace, cfg.lease_name, identity, lease_duration_s=cfg.lease_duration_s, renew_s=cfg.renew_s,
            clock=clock,
        )  # fmt: skip
        # writes go only while leading: a drain, preemption or scaling round in flight stops writing when the Lease is
        # lost (outcome not_leader); a controller that never took part in the election (term 0: its methods called
        # directly, by a test or a one-off) is not gated, and run() acts only while leading
        self.act.may_write = lambda: self.elector.term == 0 or self.elector.is_leader()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=cfg.bind_workers, thread_name_prefix="bind")
        self.bound: list[PodBind] = []
        self.bind_latency_s: list[float] = []
        self.last_plan: BindingPlan | None = None
        self.error = ""
        self.elect_error = ""  # the elector's last unexpected error while it lasts (_elect)
        self._elect_failing_since: float | None = None  # time.monotonic() of the first round of that streak
        self._next_consolidation = 0.0
        self.moves = MoveLedger(self.act, cfg.namespace)  # consolidation's moves, across leaders
        self._reclaim: threading.Thread | None = None
        self._draining: frozenset[str] = frozenset()  # the nodes of the consolidation round in flight
        self.reclaim_results: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self.preemptions: list[PreemptDecision] = []
        self.last_no_preempt: tuple[NoPreempt, ...] = ()  # the last tick's pods and gangs that got no preemption
        self.preempt_results: list[tuple[str, dict[str, str]]] = []  # (decision key, node -> apply_drain outcome)
        # decisions whose evictions failed: (decision, the victims' uids their budget refused, when)
        self._preempt_failed: list[tuple[PreemptDecision, tuple[str, ...], float]] = []
        self._preempting: list[threading.Thread] = []
        self.scaling: DeploymentScaling | None = None  # replica scaling, off the binding loop
        self._prom: PrometheusTelemetry | None = None
        self.releaser: NodeReleasePlanner | None = None
        self._idle_written: dict[str, int | None] = {}  # gpufleet.io/idle-since values this controller wrote
        self._next_release = 0.0
        self.release_results: list[tuple[NodeRelease, str]] = []
        self.uncordon_results: list[tuple[NodeUncordon, str]] = []  # parked nodes whose own cordon was undone
        self.buffer_plans: list[BufferPods] = []  # the start buffer's top-up decisions, every round's
        if cfg.release_every_s > 0:
            self.releaser = self._new_releaser()
        if cfg.scale_every_s > 0:
            if not cfg.prometheus_url:
                raise ValidationError("--prometheus", "replica scaling (--scale-every-s) reads request rates from it")
            self._prom = PrometheusTelemetry(cfg.prometheus_url)
            self.scaling = DeploymentScaling(kube, cfg, self.act, self.view, self._prom, clock,
                                             term=lambda: self.elector.term)  # fmt: skip
        self.store: StoreLink | None = None  # the inventory sync and usage metering, off the binding thread
        if cfg.meter_every_s > 0 and (not cfg.store_url or not cfg.inventory_cluster):
            raise ValidationError("--db/--cluster", "usage metering (--meter-every-s) writes into the store's cluster")
        if cfg.meter_every_s > 0 and (problem := cluster_id_problem(cfg.inventory_cluster)) is not None:
            raise ValidationError("--cluster", f"{cfg.inventory_cluster!r} {problem}")
        if cfg.node_limits_every_s > 0 and (not cfg.store_url or not cfg.inventory_cluster):
            raise ValidationError("--db/--cluster", "NodePool limits (--node-limits-every-s) read the store's cluster")
        if cfg.store_url and cfg.inventory_cluster:
            if cfg.meter_every_s > 0 and cfg.prometheus_url and self._prom is None:
                self._prom = PrometheusTelemetry(cfg.prometheus_url)  # DCGM utilization (without it: not measured)
            dcgm = gpu_mem = None
            if self._prom is not None and cfg.meter_every_s > 0:
                label = cfg.dcgm_cluster_label
                which = (label, cfg.dcgm_cluster or cfg.inventory_cluster) if label else None
                if which is not None and not valid_label_name(label):  # refused here, not on every hour
                    raise ValidationError("--dcgm-cluster-label", f"{label!r} is not a Prometheus label name")
                dcgm = functools.partial(self._prom.gpu_utilization, cluster=which)
                gpu_mem = functools.partial(self._prom.gpu_memory_gb, cluster=which)  # DCGM_FI_DEV_FB_USED
            self.store = StoreLink(self.act, cfg.store_url, cfg.inventory_cluster, sync_every_s=cfg.sync_every_s,
                                   sku_map=dict(cfg.sku_map), meter_every_s=cfg.meter_every_s, utilization=dcgm,
                                   usage_sink=usage_sink, node_limits_every_s=cfg.node_limits_every_s,
                                   node_pools=lambda: selected_node_pools(kube, cfg.node_limits_selector),
                                   steady=time.monotonic if clock is time.time else None,
                                   gpu_memory=gpu_mem)  # fmt: skip

    def _new_releaser(self) -> NodeReleasePlanner:
        cfg = self.cfg
        return NodeReleasePlanner(loop_node_scaler(), BUILTIN_PRICE_CATALOG, cfg.node_start_s,
                                  schedulers=frozenset({cfg.scheduler_name, "default-scheduler"}),
                                  buffer=loop_start_buffer())  # fmt: skip

    def _new_term(self, part: str) -> bool:
        """Whether ``part``'s memory (``bind``: the binding planner's reservations, holds and refusal backoffs;
        ``release``: the node release's idle and parked watch, its node scaler's and start buffer's state, the
        idle marks written) is from an earlier Lease term (:attr:`LeaderElector.term`): this controller lost the
        Lease and took it back, and another controller may have led meanwhile (used or woken nodes, bound, evicted).
        Such memory is dropped and rebuilt from the cluster, as a new leader's is (the node marks
        ``gpufleet.io/idle-since`` and ``parked-at`` are the durable record); audited ``lease`` ``lead_regained``.
        A dry run never leads: one term."""
        term = self.elector.term
        old = self._terms.get(part)
        self._terms[part] = term
        if old is None or old == term:
            return False
        self.act.record("lease", f"{self.cfg.namespace}/{self.cfg.lease_name}", "lead_regained", "state_rebuilt",
                        part=part, term=term)  # fmt: skip
        return True

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> Controller:
        if self.cfg.health_port > 0:
            try:
                self.health_server = HealthServer(self.health, self.cfg.health_port).start()
            except OSError as exc:  # the port is taken, or not ours to open
                raise ValidationError("--health-port", f"cannot listen on {self.cfg.health_port}: {exc}") from None
        self.view.start()
        return self

    def _health_probe(self) -> dict[str, Any]:
        """What /healthz and /metrics read at scrape time (health.py)."""
        plan = self.last_plan
        busy: dict[str, bool] = {}
        if self.store is not None:
            busy |= self.store.busy()
        if self.scaling is not None:
            busy["scale"] = self.scaling.worker.busy("scale")
        since = self._elect_failing_since
        return {"leader": self.leading(), "error": self.error, "busy": busy,
                "elector_failing_s": 0.0 if since is None else time.monotonic() - since,
                "elector_error": self.elect_error,
                "unschedulable": Counter(u.reason for u in plan.unschedulable) if plan is not None else {}}  # fmt: skip

    def stop(self) -> None:
        self._stop.set()

    def leading(self) -> bool:
        if self.cfg.dry_run:
            return True  # a dry run decides and records, but writes nothing (no Lease either)
        return self.elector.is_leader()

    def _elect(self) -> None:
        """Acquire or renew the Lease every ``renew_s`` on its own thread, so a long tick cannot starve it.

        A round that raises an error the Lease client does not wrap in ApiError (a client bug, a garbled answer)
        does not end the thread: it is recorded (``lease`` ``failed``, on stderr; then at most once a minute while
        it lasts), the next round comes after a backoff (doubling from the round's cadence up to 5 s), and
        leadership lapses at the local deadline as after any failed round.
        /healthz fails once the elector has failed for longer than ``health_stale_s`` (or its thread ended)."""
        target = f"{self.cfg.namespace}/{self.cfg.lease_name}"
        fails = 0
        reported = 0.0
        try:
            while not self._stop.is_set():
                cadence = self.cfg.renew_s if self.elector.is_leader() else min(self.cfg.renew_s, 0.5)
                try:
                    self.elector.try_acquire_or_renew()
                except Exception as exc:
                    fails += 1
                    now = time.monotonic()
                    error = f"{type(exc).__name__}: {exc}"
                    if self._elect_failing_since is None:
                        self._elect_failing_since = now
                    self.elect_error = error
                    if fails == 1 or now - reported >= 60.0:
                        reported = now
                        self.act.record("lease", target, "elector_error", "failed", error=error, rounds=fails)
                    self._stop.wait(min(cadence * 2 ** min(fails - 1, 10), max(cadence, 5.0)))
                    continue
                if fails:
                    self.act.record("lease", target, "elector_recovered", "recovered", rounds=fails)
                fails = 0
                self._elect_failing_since = None
                self.elect_error = ""
                self._stop.wait(self.cfg.renew_s if self.elector.is_leader() else min(self.cfg.renew_s, 0.5))
        finally:
            if not self._stop.is_set():  # ended by an error not even Exception: say so on /healthz
                self.elect_error = self.elect_error or "the Lease elector's thread ended"
                if self._elect_failing_since is None:
                    self._elect_failing_since = time.monotonic()

    def run(self) -> None:
        """Loop until :meth:`stop`; then drain in-flight binds and release the Lease."""
        elector: threading.Thread | None = None
        if not self.cfg.dry_run:
            elector = threading.Thread(target=self._elect, name="lease", daemon=True)
            elector.start()
        try:
            while not self._stop.is_set():
                self.health.turned()
                if self.leading():
                    self.tick()
                    self._maybe_consolidate()
                    self.maybe_release()
                    if self.store is not None and not self.cfg.dry_run:
                        self.store.tick(self.clock(), self.view.observation)
                    if self.scaling is not None and self.scaling.due():
                        self.scaling.worker.submit("scale", self.scaling.round)
                self.view.changed.wait(self.cfg.tick_s)
        except BaseException as exc:
            self.error = repr(exc)
            raise
        finally:
            self._stop.set()  # an error ended the loop: the elector's thread must end too before the join below
            if self._reclaim is not None:
                self._reclaim.join()
            for t in self._preempting:
                t.join()
            self._pool.shutdown(wait=True)
            if elector is not None:
                elector.join()
            if not self.cfg.dry_run:
                self.elector.release()
            if self.health_server is not None:
                self.health_server.stop()
            if self.scaling is not None:
                self.scaling.worker.stop(5.0)
            if self.store is not None:
                self.store.stop()
            if self._prom is not None:
                self._prom.close()
            self.view.stop()

    # -- one tick ----------------------------------------------------------------------------------------
    def tick(self) -> BindingPlan:
        """Plan in chunks of ``plan_chunk`` units on one observation, handing each chunk's binds to the
        workers at once (binding overlaps planning); wait for all binds; return the whole plan. In a new Lease term
        the planner starts afresh (:meth:`_new_term`)."""
        with self._lock:
            failed, self._preempt_failed = self._preempt_failed, []
        if self._new_term("bind"):
            self.planner = self._new_planner()
            failed = []  # the earlier term's reservations: gone with its planner
        for d, refused, at in failed:  # evictions that failed: give the reserved room back before planning
            self.planner.cancel(d, "blocked_by_pdb" if refused else "eviction_failed", refused=refused, at_s=at)
        obs = self.view.observation()
        self.product_check.scan(obs.nodes, self.act)  # a node whose product label its machine contradicts: flagged
        decided: set[str] = set()
        binds: list[PodBind] = []
        unsched: list[Unschedulable] = []
        over: tuple[str, ...] = ()
        futures: list[Future[bool]] = []
        while True:
            plan = self.planner.plan(obs, max_units=self.cfg.plan_chunk, exclude=frozenset(decided))
            decided |= {b.pod for b in plan.binds} | {u.pod for u in plan.unschedulable}
            binds += plan.binds
            unsched += plan.unschedulable
            over = plan.over_capacity
            gangs: dict[str, list[PodBind]] = {}
            for b in plan.binds:
                if b.gang:
                    gangs.setdefault(b.pod.split("/")[0] + "/" + b.gang, []).append(b)
                else:
                    futures.append(self._pool.submit(self._bind, b))
            futures += [self._pool.submit(self._bind_gang, members) for members in gangs.values()]
            if plan.remaining == 0 or (not plan.binds and not plan.unschedulable):
                break
        if self.cfg.preemption and unsched:
            self._preempt(obs, tuple(unsched))
        for f in futures:
            f.result()
        whole = BindingPlan(tuple(binds), tuple(unsched), over)
        self.last_plan = whole
        return whole

    def _preempt(self, obs: Observation, unsched: tuple[Unschedulable, ...]) -> None:
        """Preemption decisions (control/) for what the plan left unschedulable; each applied on its own thread
        through the reclaim path (checkpoint handshake, then eviction; the node is not cordoned). A decision whose
        evictions fail is cancelled in the planner at the start of the next tick, with the victims their
        PodDisruptionBudget refused (the planner bars them a while: control/preempting.py); else its preemptor binds
        once its victims are gone."""
        self._preempting = [t for t in self._preempting if t.is_alive()]
        decisions, self.last_no_preempt = self.planner.preempt(obs, unsched, self.cfg.max_preemptions_per_tick)
        for d in decisions:
            self.preemptions.append(d)
            self.act.record("preempt", d.key, d.reason, "decided", plan=d.plan_reason, nodes=list(d.nodes),
                            victims=[v.pod for v in d.victims], lost_gpu_h=round(d.lost_gpu_h, 4))  # fmt: skip
            t = threading.Thread(target=self._apply_preemption, args=(d,), name="preempt", daemon=True)
            self._preempting.append(t)
            t.start()

    def _apply_preemption(self, d: PreemptDecision) -> None:
        got, refused = apply_preemption(self.act, d, checkpoint_timeout_s=self.cfg.checkpoint_timeout_s,
                                        grace_s=self.cfg.eviction_grace_s)  # fmt: skip
        with self._lock:
            self.preempt_results.append((d.key, got))
            if any(o not in ("drained", "dry_run") for o in got.values()):
                self._preempt_failed.append((d, refused, self.clock()))

    def maybe_scale(self) -> ScalePlan | None:
        """The replica scaling's period decision now, on the caller's thread (scaling.py); None when off or not due."""
        return self.scaling.maybe_scale() if self.scaling is not None else None

    def maybe_react(self) -> ScalePlan | None:
        """The replica scaling's fast path now, on the caller's thread (scaling.py); None when off or not due."""
        return self.scaling.maybe_react() if self.scaling is not None else None

    @property
    def metering(self) -> MeterLoop | None:
        """The usage meter (the store link's), None when off."""
        return self.store.metering if self.store is not None else None

    @property
    def syncs(self) -> int:
        """Inventory syncs written into the store so far."""
        return self.store.syncs if self.store is not None else 0

    def maybe_meter(self) -> list[HourWritten]:
        """Usage metering on its cadence, on the caller's thread (the loop instead reads on its own thread and
        writes on the store's, :class:`StoreLink`); each hour written is one audit record ``usage_metered``. A dry
        run meters nothing (it writes nothing)."""
        if self.store is None or self.store.metering is None or self.cfg.dry_run:
            return []
        done = self.store.metering.step(self.clock(), self.view.observation)
        self.store.record_hours(done)
        return done

    def maybe_release(self) -> list[tuple[NodeRelease, str]]:
        """Every ``release_every_s``: the loop's node scaler on the observation (control/node_release.py) picks
        idle launched GPU nodes, keeping those the loop's start buffer holds (``releaser.buffer_decisions``: the
        last decision per product); each is released (:func:`apply_release`: cordon, check empty, delete) and
        recorded with the scaler's reason. Parked nodes (gpufleet's own cordon: drained by a consolidation, or a
        release cut short) are released the same way or uncordoned (``releaser.decide``; the nodes of the
        consolidation round in flight are left to it; ``uncordon_results``). Then the buffer's top-up (``buffer_pods``, control/buffer_pods.py): on the
        same observation, placeholder pods created for the missing buffer nodes and deleted beyond it (kept in
        ``buffer_plans``); with the top-up off, the placeholders an earlier run left are deleted (no buffer wanted:
        each would hold a whole GPU node for good). The idle spells the planner watches are written on their nodes
        (:func:`mark_idle`) for the next controller. In a new Lease term the planner starts afresh and reads the
        marks (:meth:`_new_term`). Returns this round's (release, outcome) pairs."""
        if self.releaser is None:
            return []
        if self._new_term("release"):
            self.releaser = self._new_releaser()
            self._idle_written.clear()
        now = self.clock()
        if not due(now, self._next_release, self.cfg.release_every_s):
            return []
        self._next_release = now + self.cfg.release_every_s
        obs = self.view.observation()
        steady = time.monotonic() if self.clock is time.time else None  # a test's own clock is its own steady one
        with self._lock:
            draining = self._draining
        decided = self.releaser.decide(obs, steady_s=steady, draining=draining)
        done = [(r, apply_release(self.act, r)) for r in decided.releases]
        self.release_results += done
        self.uncordon_results += [(u, self.act.uncordon_own(u.node, u.reason)) for u in decided.uncordons]
        released = {r.node for r, out in done if out == "released"}
        mark_idle(self.act, obs, self.releaser.idle_marks(), released, self._idle_written)
        buffer = self.releaser.buffer
        if buffer is not None:
            plans = plan_buffer_pods(obs, self.releaser.buffer_decisions if self.cfg.buffer_pods else {}, buffer)
            self.buffer_plans += plans
            apply_buffer_pods(self.act, plans, self.cfg.buffer_namespace or self.cfg.namespace,
                              self.cfg.scheduler_name, self.cfg.buffer_image)  # fmt: skip
        return done

    def _maybe_consolidate(self) -> None:
        """Every ``consolidate_every_s``: plan (control/reclaim.py) and apply drains in a background thread,
        one round at a time, within ``max_moves_per_hour``: the moves of the last hour count, this controller's own
        evictions and those in the moves ledger on the Lease's Namespace (any leader's; consolidation.py)."""
        every = self.cfg.consolidate_every_s
        now = self.clock()
        if (
            every <= 0
            or not due(now, self._next_consolidation, every)
            or (self._reclaim is not None and self._reclaim.is_alive())
        ):
            return
        self._next_consolidation = now + every
        recent = moves_last_hour(self.act, self.moves, now)
        plan = plan_reclaim(self.view.observation(), int(now), self.cfg.max_moves_per_hour, recent)
        if not plan.drains:
            return

        def work() -> None:
            try:
                got = drain_round(self.act, self.moves, plan, now, checkpoint_timeout_s=self.cfg.checkpoint_timeout_s,
                                  grace_s=self.cfg.eviction_grace_s)  # fmt: skip
            finally:
                with self._lock:
                    self._draining = frozenset()
            with self._lock:
                self.reclaim_results.append(got)

        with self._lock:
            self._draining = frozenset(d.node for d in plan.drains)
        self._reclaim = threading.Thread(target=work, name="reclaim", daemon=True)
        self._reclaim.start()

    def _bind(self, b: PodBind) -> bool:
        ns, name = b.pod.split("/", 1)
        t0 = time.perf_counter()
        if not self.elector.is_leader() and not self.cfg.dry_run:
            self.planner.abort(b)
            return False  # lost the Lease mid-tick: act no more
        out = self.act.bind(ns, name, b.uid, b.node, b.gpu_slots, b.reason)
        dt = time.perf_counter() - t0
        with self._lock:
            if out in ("applied", "dry_run"):
                self.bound.append(b)
                self.bind_latency_s.append(dt)
        if out not in ("applied", "dry_run"):
            self.planner.abort(b)
            return False
        return True

    def _bind_gang(self, members: list[PodBind]) -> bool:
        ok = [b for b in members if self._bind(b)]
        if len(ok) == len(members):
            return True
        for b in ok:  # never leave a gang partly running
            ns, name = b.pod.split("/", 1)
            self.act.delete_pod(ns, name, "gang_rollback")
        return False
