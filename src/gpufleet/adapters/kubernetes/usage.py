"""GPU usage metered from the cluster into the store's utilization records (what the planning pass reads).

The controller observes its cluster every few seconds. :class:`UsageMeter` integrates, between two observations,
the GPUs each pod holds, per hour bucket and per :class:`UsageKey` (workload, team, SKU, pool). An hour is
*closed* once the clock has passed its end; :func:`usage_records` turns it into ingest records
(``POST /v1/utilization:ingest``'s shape; the controller hands them to its usage sink, which the CLI makes
:meth:`gpufleet.service.ingest.IngestService.ingest_leaving_out`):

* ``gpus_allocated``: the key's GPU-seconds over the seconds of the hour the meter observed (a controller that
  started, or led, for part of the hour measures that part; an hour observed less than half is not written);
* ``gpu_util``: the mean DCGM utilization of the key's pods over the hour, weighted by their GPU-seconds
  (dcgm-exporter with pod attribution, read from Prometheus; the controller's cluster's series only,
  ``ControllerConfig.dcgm_cluster_label``). Pods that share one GPU (time-slicing: dcgm-exporter attributes the
  device, with its whole utilization, to each of them) and together hold more than that one GPU split its busy
  time in proportion to the GPUs each holds (:func:`pod_utilization`), so no more busy GPU-time is written than
  the device had. A key none of whose pods has a DCGM sample (or a
  controller run without Prometheus) is written with ``gpu_util`` None, not measured: its GPUs count for planning
  and cost, its time is neither busy nor idle in the books, and none is made up (reported per hour as
  ``util_unmeasured_gpu_h``);
* ``pool_id``: the store's pool of the node's region, SKU and tier (``karpenter.sh/capacity-type``: on-demand,
  spot, reserved), so the planning pass plans the use where it ran (docs/service.md, "Several regions"); none
  when the node's region, product or capacity type is unknown, or no such pool is stored;
* ``workload_id``: the pod's annotation ``gpufleet.io/workload-id`` (a workload registered in the service, whose
  kind the planning pass reads: a serving workload's records feed the stock-out cover), else ``namespace:owner``;
* ``source``: ``k8s:<cluster>:<region>:<sku>:<tier>`` (``k8s:<cluster>:<sku>`` without a pool): one record per
  workload, pool and hour; re-writing an hour replaces it (the ingest key is source, bucket, workload).

A gap between two observations longer than ``max_gap_s`` (the controller was down, or another replica led) is not
integrated: what the pods held then is unknown, not assumed.

The hours are the wall clock's; the time held between two readings is the steady clock's where the meter has one
(``MeterLoop(steady=...)``, the controller's ``time.monotonic`` when it runs on ``time.time``). A wall clock stepped
back (NTP correcting a clock that ran ahead, a VM resumed) then neither pauses the readings nor loses what the pods
held while the wall clock was behind the meter's last reading: that time is added to the hour the meter had
reached (open still), whose ``gpus_allocated`` then exceeds the GPUs held by as much (that wall hour held more real
time); one stepped ahead is not counted as held. Until session 46 such readings were dropped: a step back of 20
minutes lost 20 minutes of every pod's GPUs. Without a steady clock, as before: a reading not after the last one
is dropped.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.adapters.kubernetes.cadence import due
from gpufleet.adapters.kubernetes.dcgm_pods import pod_utilization
from gpufleet.adapters.kubernetes.labels import A_WORKLOAD_ID
from gpufleet.adapters.sql.models import PoolRow, SkuRow
from gpufleet.control.observation import Observation
from gpufleet.cost.telemetry import TelemetryBatch
from gpufleet.domain.catalog import sku_for

TIERS = {"on-demand": "on_demand", "spot": "spot", "reserved": "reserved"}
POOLS_EVERY_S = 600.0  # how often the meter reads the store's pools again
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")  # the store's ids (service/ingest.py)


def safe_id(raw: str) -> str:
    """``raw`` as a store id (a letter or digit, then up to 63 of letters, digits and ``_ . : -``): other
    characters become ``-``, one that does not start with a letter or digit gets an ``x`` in front, and a longer
    one keeps its first 55 characters and a hash of the whole."""
    s = re.sub(r"[^A-Za-z0-9_.:-]", "-", raw)
    if not s[:1].isalnum():
        s = "x" + s
    if _ID.fullmatch(s):
        return s
    return f"{s[:55]}.{hashlib.sha256(raw.encode()).hexdigest()[:8]}"


SOURCE_HASH = 6  # hex digits of the hash that stands for the shortened rest of a long source
MAX_CLUSTER_ID = 64 - len("k8s:") - len(":") - SOURCE_HASH  # 53: the source keeps "k8s:<cluster>:" whole


def cluster_id_problem(cluster: str) -> str | None:
    """Why ``cluster`` cannot be a metered cluster's id (None when it can): the meter's sources are
    ``k8s:<cluster>:<region>:<sku>:<tier>`` and the cluster feed (``service/cluster_feed.py``) selects a cluster's
    records by the prefix ``k8s:<cluster>:``, so a ``:`` in the id would make one cluster's prefix another's
    (``prod`` and ``prod:eu``), and an id longer than :data:`MAX_CLUSTER_ID` leaves no room in a 64-character
    source for anything after the prefix."""
    if ":" in cluster:
        return "must not contain ':' (the usage meter's sources are k8s:<cluster>:...)"
    if len(cluster) > MAX_CLUSTER_ID:
        return f"must be at most {MAX_CLUSTER_ID} characters (the usage meter's sources are k8s:<cluster>:...)"
    return None


def source_id(cluster: str, rest: str) -> str:
    """The meter's source ``k8s:<cluster>:<rest>`` as a store id (:func:`safe_id`), shortened, when longer than 64
    characters, in ``rest`` only (its start, then ``.`` and a hash of the whole): the prefix ``k8s:<cluster>:``
    the cluster feed matches stays whole for any cluster id :func:`cluster_id_problem` accepts."""
    raw = f"k8s:{cluster}:{rest}"
    prefix = f"k8s:{cluster}:"
    if len(raw) <= 64 or _ID.fullmatch(prefix) is None or len(prefix) + SOURCE_HASH > 64:
        return safe_id(raw)  # fits as it is; or an id the feed cannot match exactly (refused where configured)
    digest = hashlib.sha256(raw.encode()).hexdigest()
    room = 64 - len(prefix)
    tail = re.sub(r"[^A-Za-z0-9_.:-]", "-", rest)
    if room >= 9 + 1:
        return f"{prefix}{tail[: room - 9]}.{digest[:8]}"
    return prefix + digest[:room]


@dataclass(frozen=True, slots=True)
class UsageKey:
    workload_id: str
    team_id: str
    sku_id: str
    pool_id: str | None
    source: str


@dataclass(frozen=True, slots=True)
class Holdings:
    """What the pods hold at one observation: ``(namespace, pod) -> (key, GPUs)``, and the GPU pods not metered
    with the reason (``unknown_sku``: the node's product maps to no SKU)."""

    pods: dict[tuple[str, str], tuple[UsageKey, float]]
    skipped: tuple[tuple[str, str], ...] = ()


def holdings(
    obs: Observation,
    cluster: str,
    sku_ids: Sequence[str],
    pools: Mapping[tuple[str, str, str], str],
    sku_map: Mapping[str, str] | None = None,
) -> Holdings:
    """The GPUs each active pod bound to a GPU node holds (a share: its fraction of one GPU), keyed by its workload
    (annotation ``gpufleet.io/workload-id``, else ``namespace:owner``, else ``namespace:pod``), team (label
    ``gpufleet.io/team``, default the namespace), SKU and pool (``pools``: ``(region, sku, tier) -> pool id`` of the
    store)."""
    nodes = {n.name: n for n in obs.nodes}
    out: dict[tuple[str, str], tuple[UsageKey, float]] = {}
    skipped: list[tuple[str, str]] = []
    for p in obs.pods:
        node = nodes.get(p.node)
        if not p.active or node is None or p.request.num_gpu <= 0:
            continue
        sku = sku_for(node.sku, sku_ids, sku_map or {})
        if sku is None:
            skipped.append((p.key, "unknown_sku"))
            continue
        tier = TIERS.get(node.capacity_type, "")
        pool = pools.get((node.region, sku, tier)) if node.region and tier else None
        source = source_id(cluster, f"{node.region}:{sku}:{tier}" if pool else sku)
        workload = p.annotation(A_WORKLOAD_ID) or f"{p.namespace}:{p.owner_name or p.name}"
        key = UsageKey(safe_id(workload), safe_id(p.team or p.namespace), sku, pool, source)
        out[(p.namespace, p.name)] = (key, p.request.num_gpu * p.request.gpu_milli / 1000)
    return Holdings(out, tuple(skipped))


@dataclass(slots=True)
class ClosedHour:
    """One hour the meter has finished: the seconds of it observed, and the GPU-seconds each pod held, by key."""

    start_s: int
    covered_s: float
    pod_gpu_s: dict[tuple[str, str], tuple[UsageKey, float]]
    pod_gpus: dict[tuple[str, str], float] = field(default_factory=dict)  # the most GPUs each pod held at once


@dataclass(slots=True)
class UsageMeter:
    """Integrates the observed holdings per hour bucket (module docstring)."""

    bucket_s: int = 3600
    max_gap_s: float = 300.0
    _at_s: float | None = None
    _held: dict[tuple[str, str], tuple[UsageKey, float]] = field(default_factory=dict)
    _open: dict[int, ClosedHour] = field(default_factory=dict)
    _steady_s: float | None = None  # the steady clock at the last observation given one

    def observe(
        self, at_s: float, held: Mapping[tuple[str, str], tuple[UsageKey, float]], steady_s: float | None = None
    ) -> None:
        """The holdings seen at ``at_s``: what was held since the last observation is integrated up to ``at_s``
        (unless the gap exceeds ``max_gap_s``), then ``held`` is what is held from now. ``steady_s``: a steady
        clock's reading (``time.monotonic``) with it: the time held is the steady clock's, the wall clock's
        advance (never back) the seconds of the hours it covers, the rest added to the hour at the meter's last
        reading (module docstring). Without it a reading whose ``at_s`` is not after the last is dropped."""
        span = at_s - self._at_s if self._at_s is not None else 0.0
        real = span if steady_s is None or self._steady_s is None else steady_s - self._steady_s
        if self._at_s is not None and 0 < real <= self.max_gap_s:
            covered = min(max(span, 0.0), real)
            if covered > 0:
                self._integrate(self._at_s, self._at_s + covered)
            if real > covered:  # the wall clock behind the last reading: held all the same
                start = int(self._at_s // self.bucket_s * self.bucket_s)
                self._hold(self._open.setdefault(start, ClosedHour(start, 0.0, {})), real - covered)
        if steady_s is not None:
            self._steady_s = steady_s
        if self._at_s is None or at_s > self._at_s or (steady_s is not None and real > 0):
            self._held = dict(held)
        if self._at_s is None or at_s > self._at_s:
            self._at_s = at_s

    def _integrate(self, t0: float, t1: float) -> None:
        t = t0
        while t < t1:
            start = int(t // self.bucket_s * self.bucket_s)
            end = min(t1, start + self.bucket_s)
            hour = self._open.setdefault(start, ClosedHour(start, 0.0, {}))
            hour.covered_s += end - t
            self._hold(hour, end - t)
            t = end

    def _hold(self, hour: ClosedHour, dt: float) -> None:
        """The holdings held ``dt`` seconds in ``hour``."""
        for pod, (key, gpus) in self._held.items():
            k, got = hour.pod_gpu_s.get(pod, (key, 0.0))
            hour.pod_gpu_s[pod] = (k, got + gpus * dt)
            hour.pod_gpus[pod] = max(hour.pod_gpus.get(pod, 0.0), gpus)

    def closed(self, before_s: float) -> list[ClosedHour]:
        """The hours ending at or before ``before_s``, oldest first; the meter forgets them."""
        done = sorted(s for s in self._open if s + self.bucket_s <= before_s)
        return [self._open.pop(s) for s in done]

    def waiting(self) -> list[int]:
        """The starts of the hours not yet taken by :meth:`closed` (the one being observed included), oldest first."""
        return sorted(self._open)

    def drop(self, start_s: int) -> None:
        """Forget an hour (it will not be written)."""
        self._open.pop(start_s, None)

    def reopen(self, hours: Iterable[ClosedHour]) -> None:
        """Hours taken by :meth:`closed` that could not be written (e.g. Prometheus did not answer): kept to try
        again."""
        for h in hours:
            self._open.setdefault(h.start_s, h)


@dataclass(frozen=True, slots=True)
class MeteredHour:
    """The records of one closed hour; ``util_unmeasured_gpu_h``: the GPU-hours written without a utilization (keys
    without a DCGM sample); ``undercovered``: the hour was observed less than half, and its ``unwritten_gpu_h`` are
    not written."""

    records: list[dict[str, object]]
    util_unmeasured_gpu_h: float
    undercovered: bool = False
    unwritten_gpu_h: float = 0.0


def usage_records(
    hour: ClosedHour,
    pod_util: Mapping[tuple[str, str], float],
    bucket_s: int,
    pod_mem_gb: Mapping[tuple[str, str], float] | None = None,
) -> MeteredHour:
    """The ingest records of a closed hour (module docstring): per key, GPUs over the observed seconds and the
    GPU-seconds-weighted mean utilization of its pods with a DCGM reading (``pod_util``, 0..1; None where none of
    its pods has one), and ``gpu_mem_gb``: the most GPU memory one of its pods used (``pod_mem_gb``), None unless
    every pod of the key that held GPUs has a reading."""
    mem = pod_mem_gb or {}
    key_mem: dict[UsageKey, float | None] = {}
    for pod, (key, g) in hour.pod_gpu_s.items():
        if g > 0:
            m = mem.get(pod)
            prev = key_mem.get(key, 0.0)
            key_mem[key] = None if m is None or prev is None else max(prev, m)
    if hour.covered_s < bucket_s / 2:
        gpu_h = sum(g for _, g in hour.pod_gpu_s.values()) / 3600
        return MeteredHour([], 0.0, True, gpu_h)
    gpu_s: dict[UsageKey, float] = {}
    util_w: dict[UsageKey, tuple[float, float]] = {}  # (sum of util x GPU-s, GPU-s with a reading)
    for pod, (key, g) in hour.pod_gpu_s.items():
        gpu_s[key] = gpu_s.get(key, 0.0) + g
        if pod in pod_util and g > 0:
            w, n = util_w.get(key, (0.0, 0.0))
            util_w[key] = (w + min(max(pod_util[pod], 0.0), 1.0) * g, n + g)
    records: list[dict[str, object]] = []
    unmeasured = 0.0
    for key in sorted(gpu_s, key=lambda k: (k.source, k.workload_id)):
        if gpu_s[key] <= 0:
            continue
        util: float | None = None
        if key in util_w:
            w, n = util_w[key]
            util = round(w / n, 6)
        else:
            unmeasured += gpu_s[key] / 3600
        records.append(
            {"source": key.source, "bucket_start_s": hour.start_s, "bucket_s": bucket_s,
             "workload_id": key.workload_id, "team_id": key.team_id, "sku_id": key.sku_id, "pool_id": key.pool_id,
             "gpus_allocated": round(gpu_s[key] / hour.covered_s, 6), "gpu_util": util,
             "gpu_mem_gb": key_mem.get(key)}
        )  # fmt: skip
    return MeteredHour(records, unmeasured)


def store_pools(session: Session) -> tuple[list[str], dict[tuple[str, str, str], str]]:
    """The store's SKU ids, and its pools as ``(region, sku, tier) -> pool id`` (the first by id where several)."""
    sku_ids = list(session.scalars(select(SkuRow.id)).all())
    pools: dict[tuple[str, str, str], str] = {}
    for pid, region, sku, tier in session.execute(
        select(PoolRow.id, PoolRow.region_id, PoolRow.sku_id, PoolRow.tier).order_by(PoolRow.id)
    ).all():
        pools.setdefault((region, sku, tier), pid)
    return sku_ids, pools


# the usage sink: ingest records, return (written, refusals); the CLI gives IngestService.ingest_leaving_out
UsageSink = Callable[[Sequence[dict[str, object]]], tuple[int, list[str]]]


@dataclass(frozen=True, slots=True)
class HourWritten:
    start_s: int
    records: int
    util_unmeasured_gpu_h: float
    undercovered: bool
    unwritten_gpu_h: float
    refused: tuple[str, ...]


class MeterLoop:
    """The controller's usage metering on its cadence (leader only): observe every ``every_s``, and write each
    hour once ``util_delay_s`` have passed its end (the last DCGM scrapes are in). When Prometheus or the store does
    not answer, the hour is kept and tried again; more than ``keep_hours`` waiting drops the oldest (reported).
    An hour whose DCGM read still fails ``util_wait_s`` after its end is written with its utilization not measured:
    the GPUs the pods held are known from the cluster, and a Prometheus that refuses the query for good (over its
    sample limit, an answer over the adapter's cap) must not make them unknown. ``utilization`` None (no
    Prometheus): every record's utilization is not measured."""

    def __init__(
        self,
        cluster: str,
        pools: Callable[[], tuple[list[str], dict[tuple[str, str, str], str]]],
        utilization: Callable[[int, int, int], TelemetryBatch] | None,
        sink: UsageSink,
        *,
        every_s: float = 30.0,
        bucket_s: int = 3600,
        util_delay_s: float = 120.0,
        step_s: int = 60,
        keep_hours: int = 48,
        util_wait_s: float = 3 * 3600.0,
        sku_map: Mapping[str, str] | None = None,
        steady: Callable[[], float] | None = None,
        gpu_memory: Callable[[int, int, int], Mapping[tuple[str, str], float]] | None = None,
    ) -> None:
        self.cluster = cluster
        self._gpu_memory = gpu_memory  # each pod's peak GPU memory (GB) over a range; None: not measured
        self._steady = steady  # the steady clock the time held is counted on (module docstring); None: the wall's
        self._pools = pools
        self._utilization = utilization
        self._sink = sink
        self.every_s = every_s
        self.util_delay_s = util_delay_s
        self.step_s = step_s
        self.keep_hours = keep_hours
        self.util_wait_s = util_wait_s
        self._sku_map = dict(sku_map or {})
        self.meter = UsageMeter(bucket_s=bucket_s, max_gap_s=max(300.0, 3 * every_s))
        self._next_s = 0.0
        self._pools_read: tuple[list[str], dict[tuple[str, str, str], str]] | None = None
        self._pools_at_s = 0.0
        self.written: list[HourWritten] = []
        self.failures: deque[str] = deque(maxlen=100)  # the last failures (Prometheus, the store)
        self.dropped_hours: list[int] = []
        self._lock = threading.Lock()  # the meter's hours: read on the controller's loop, written on its store worker

    @property
    def measures_utilization(self) -> bool:
        """Whether the records carry a DCGM utilization (a Prometheus to read it from)."""
        return self._utilization is not None

    def _store_pools(self, now_s: float) -> tuple[list[str], dict[tuple[str, str, str], str]] | None:
        """The store's SKUs and pools, read again every ``POOLS_EVERY_S``; when the store does not answer, the last
        read (None before the first), and the read is tried again at the next reading."""
        if self._pools_read is None or now_s >= self._pools_at_s + POOLS_EVERY_S:
            try:
                self._pools_read = self._pools()
                self._pools_at_s = now_s
            except Exception as exc:  # the store did not answer: the last read serves
                self.failures.append(f"pools at {now_s:.0f}: {exc}")
        return self._pools_read

    def step(self, now_s: float, observe: Callable[[], Observation]) -> list[HourWritten]:
        """Read (on the cadence) and write the hours that are due, on the caller's thread; returns the hours written
        now. The controller's loop instead calls :meth:`read` and has its store worker call :meth:`write_due`."""
        if not due(now_s, self._next_s, self.every_s):
            return []
        self._store_pools(now_s)
        if not self.read(now_s, observe):
            return []
        return self.write_due(now_s, refresh_pools=False)

    def read(self, now_s: float, observe: Callable[[], Observation]) -> bool:
        """On the cadence, what the pods hold now, in memory (no store, no Prometheus): the pools last read from the
        store name them; before any read of the store, nothing is read. True when the cadence fell due (the hours
        due are then :meth:`write_due`'s)."""
        if not due(now_s, self._next_s, self.every_s):  # a wall clock stepped back does not pause it
            return False
        self._next_s = now_s + self.every_s
        store = self._pools_read
        if store is None:  # the store's pools never read yet: no reading this time
            return True
        sku_ids, pools = store
        held = holdings(observe(), self.cluster, sku_ids, pools, self._sku_map).pods
        with self._lock:
            self.meter.observe(now_s, held, self._steady() if self._steady is not None else None)
        return True

    def _hour_utilization(
        self, start_s: int, now_s: float, held: Mapping[tuple[str, str], float] | None = None
    ) -> dict[tuple[str, str], float]:
        """The pods' DCGM utilization over the hour from ``start_s`` (``held``: the GPUs each pod held, to split a
        shared GPU's, :func:`pod_utilization`): none without Prometheus; when the read fails,
        the failure is raised while the hour is younger than ``util_wait_s`` (tried again later), else reported and
        the hour goes without it."""
        if self._utilization is None:
            return {}
        b = self.meter.bucket_s
        try:
            batch = self._utilization(start_s, start_s + b - self.step_s, self.step_s)
            return pod_utilization(batch, held)
        except Exception as exc:
            if now_s < start_s + b + self.util_wait_s:
                raise
            self.failures.append(f"{start_s}: utilization not measured after {self.util_wait_s:.0f} s: {exc}")
            return {}

    def _hour_gpu_memory(self, start_s: int) -> dict[tuple[str, str], float]:
        """The pods' peak DCGM GPU memory (GB) over the hour from ``start_s``; none without Prometheus, and none
        (reported) when the read fails: the hour is written with its GPU memory not measured, never held back."""
        if self._gpu_memory is None:
            return {}
        try:
            return dict(self._gpu_memory(start_s, start_s + self.meter.bucket_s - self.step_s, self.step_s))
        except Exception as exc:
            self.failures.append(f"{start_s}: GPU memory not measured: {exc}")
            return {}

    def write_due(self, now_s: float, *, refresh_pools: bool = True) -> list[HourWritten]:
        """The store's pools read again when due, and the hours closed ``util_delay_s`` before ``now_s`` written
        (Prometheus, then the sink); an hour that could not be written is kept for the next call."""
        if refresh_pools:
            self._store_pools(now_s)
        with self._lock:
            hours = self.meter.closed(now_s - self.util_delay_s)
        done: list[HourWritten] = []
        for i, hour in enumerate(hours):
            b = self.meter.bucket_s
            try:
                util = self._hour_utilization(hour.start_s, now_s, hour.pod_gpus)
                m = usage_records(hour, util, b, self._hour_gpu_memory(hour.start_s))
                written, refused = self._sink(m.records) if m.records else (0, [])
            except Exception as exc:  # Prometheus or the store did not answer: keep the hours, try again
                self.failures.append(f"{hour.start_s}: {exc}")
                with self._lock:
                    self.meter.reopen(hours[i:])
                break
            done.append(HourWritten(hour.start_s, written, m.util_unmeasured_gpu_h, m.undercovered, m.unwritten_gpu_h,
                                    tuple(refused)))  # fmt: skip
        with self._lock:
            waiting = self.meter.waiting()
            for oldest in waiting[: max(0, len(waiting) - self.keep_hours - 1)]:  # the open hour and keep_hours
                self.meter.drop(oldest)
                self.dropped_hours.append(oldest)
        self.written.extend(done)
        return done
