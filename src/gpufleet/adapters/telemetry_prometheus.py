"""GPU utilization from Prometheus (dcgm-exporter metrics) through the HTTP API's ``query_range``, and instant
queries (``query_at`` / ``sum_at``: a serving Deployment's request rate for the controller's replica policy).

All network I/O goes through one ``httpx.Client``; pass ``transport=`` to test without a server. Long ranges are
split so no request asks for more than ``MAX_POINTS`` points per series (Prometheus refuses > 11,000). An answer is
read within ``timeout_s`` (httpx bounds each read of the socket; a server that sends its answer a byte at a time is
cut once the deadline has passed, so at most about twice ``timeout_s`` in all) and up to ``MAX_ANSWER_BYTES``.
The instant and range reads take a caller's ``deadline`` too (a ``time.monotonic()`` instant, e.g. the end of a
scaling round): a read is not started past it (:class:`DeadlinePassed`) and waits no longer than it.
Labels read from dcgm-exporter series: ``namespace`` and ``pod`` (set when the exporter maps GPUs to pods),
``Hostname`` and ``gpu`` for the device, ``GPU_I_ID`` for a MIG instance. A Prometheus that holds several clusters'
series (federation, Thanos, Mimir) tells them apart by a cluster label its setup adds (external labels,
relabelling); ``gpu_utilization(cluster=(label, value))`` reads the series of that cluster and those without the
label (a Prometheus of one cluster), never another cluster's pods of the same name.
GPU memory (``gpu_memory_gb``): ``DCGM_FI_DEV_FB_USED`` (MiB of framebuffer used per device) read the same way,
per pod the most, over the steps, of the sum over its devices, in GB (MiB / 1024, the unit of a SKU's
``memory_gb``).
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

import httpx
import numpy as np

from gpufleet.adapters.inputs import MAX_UNIX_S
from gpufleet.cost.telemetry import GPU_FB_USED, GPU_UTIL, BatchBuilder, SeriesKey, TelemetryBatch
from gpufleet.domain.errors import GpufleetError, ValidationError

MAX_POINTS = 10_000
MAX_ANSWER_BYTES = 256 * 1024 * 1024  # the meter's hour of DCGM at 60 s steps is about 2.5 KB a GPU


class TelemetryUnavailable(GpufleetError):
    """The telemetry source could not answer (down, refused the query, or answered nonsense)."""


class DeadlinePassed(TelemetryUnavailable):
    """The caller's deadline passed before the answer was read (or before the read was started)."""


def _label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


_RE2_META = re.compile(r"([\\.+*?()|\[\]{}^$])")
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def re2_escape(v: str) -> str:
    """``v`` as a literal inside a PromQL regex (RE2): its metacharacters escaped (``api.v1`` matches only itself)."""
    return _RE2_META.sub(r"\\\1", v)


def valid_label_name(label: str) -> bool:
    """Whether PromQL accepts ``label`` as a label name."""
    return _LABEL_NAME.fullmatch(label) is not None


def cluster_matcher(label: str, value: str) -> str:
    """The matcher ``label=~"value|"``: the series of cluster ``value``, and those that carry no ``label`` (Prometheus
    reads a missing label as ``""``). A label name PromQL does not accept is a ValidationError."""
    if not valid_label_name(label):
        raise ValidationError("cluster label", f"{label!r} is not a Prometheus label name")
    return f'{label}=~"{_label_value(re2_escape(value))}|"'


def series_key(metric: str, labels: dict[str, str]) -> SeriesKey:
    """The device key of one dcgm-exporter series."""
    host = labels.get("Hostname") or labels.get("instance", "")
    device = f"{host}/{labels.get('gpu', labels.get('UUID', ''))}"
    if labels.get("GPU_I_ID"):
        device += f"/mig{labels['GPU_I_ID']}"
    extra = tuple(sorted((k, v) for k, v in labels.items() if k in ("container", "modelName", "GPU_I_PROFILE")))
    return SeriesKey(metric, labels.get("namespace", ""), labels.get("pod", ""), device, extra)


def add_matrix(builder: BatchBuilder, metric: str, result: Any, where: str = "result") -> None:
    """Add a Prometheus ``matrix`` result (``[{"metric": {...}, "values": [[t, "v"], ...]}, ...]``); a body of
    another shape is a ValidationError naming the element (``where`` prefixes it, e.g. the file)."""
    if not isinstance(result, list):
        raise ValidationError("data.result", "expected a list of series", where)
    for i, s in enumerate(result):
        at = f"{where}: data.result[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("metric", {}), dict):
            raise ValidationError("metric", "expected {'metric': {...}, 'values': [[t, 'v'], ...]}", at)
        labels = {str(k): str(v) for k, v in s.get("metric", {}).items()}
        values = s.get("values", [])
        if not values:
            continue
        try:
            t = np.array([float(p[0]) for p in values], dtype=np.float64)
            v = np.array([float(p[1]) for p in values], dtype=np.float64)
        except (TypeError, ValueError, OverflowError, IndexError, KeyError):  # OverflowError: an int beyond a float
            raise ValidationError("values", "expected [[unix_seconds, 'value'], ...]", at) from None
        if not np.all(np.isfinite(t) & (t >= 0) & (t <= MAX_UNIX_S)):
            raise ValidationError("values", f"timestamps must be UNIX seconds in 0..{MAX_UNIX_S}", at)
        builder.add(series_key(labels.get("__name__", metric), labels), t.astype(np.int64), v)


class PrometheusTelemetry:
    """Reads DCGM utilization per pod/namespace/device from a Prometheus server."""

    def __init__(self, base_url: str, *, timeout_s: float = 10.0, transport: httpx.BaseTransport | None = None) -> None:
        self._client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s, transport=transport)
        self._timeout_s = timeout_s

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusTelemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query_range(
        self, query: str, start_s: int, end_s: int, step_s: int, *, deadline: float | None = None
    ) -> list[dict[str, Any]]:
        """One ``/api/v1/query_range`` call; returns the matrix result or raises TelemetryUnavailable."""
        params = {"query": query, "start": start_s, "end": end_s, "step": step_s}
        return self._result("/api/v1/query_range", params, "matrix", deadline)

    def query_at(self, query: str, at_s: float, *, deadline: float | None = None) -> list[dict[str, Any]]:
        """One ``/api/v1/query`` (instant) call at ``at_s``; the vector result, or raises TelemetryUnavailable."""
        return self._result("/api/v1/query", {"query": query, "time": at_s}, "vector", deadline)

    def _result(
        self, path: str, params: dict[str, Any], result_type: str, deadline: float | None = None
    ) -> list[dict[str, Any]]:
        status, raw = self._get(path, params, deadline)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            raise TelemetryUnavailable(f"prometheus answered {status} with non-JSON") from None
        if not isinstance(body, dict):
            raise TelemetryUnavailable(f"prometheus answered {status} with JSON that is not an object")
        if status != 200 or body.get("status") != "success":
            query = params["query"]
            raise TelemetryUnavailable(f"prometheus refused {query!r}: {body.get('error', status)}")
        data = body.get("data", {})
        if not isinstance(data, dict) or data.get("resultType") != result_type:
            got = data.get("resultType") if isinstance(data, dict) else type(data).__name__
            raise TelemetryUnavailable(f"expected a {result_type} result, got {got!r}")
        result = data.get("result", [])
        if not isinstance(result, list) or not all(isinstance(r, dict) for r in result):
            raise TelemetryUnavailable(f"the {result_type} result is not a list of series")
        return result

    def _get(self, path: str, params: dict[str, Any], until: float | None = None) -> tuple[int, bytes]:
        """The status and body of one GET, read within the timeout (and the caller's deadline ``until``, a
        ``time.monotonic()`` instant) and ``MAX_ANSWER_BYTES``."""
        now = time.monotonic()
        deadline = now + self._timeout_s
        timeout = self._timeout_s
        if until is not None:
            if now >= until:
                raise DeadlinePassed("the deadline passed before prometheus was asked")
            deadline = min(deadline, until)
            timeout = min(timeout, until - now)
        try:
            with self._client.stream("GET", path, params=params, timeout=timeout) as resp:
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise TelemetryUnavailable(f"prometheus answered more than {MAX_ANSWER_BYTES} bytes")
                    if time.monotonic() > deadline:
                        raise self._late(until, deadline)
                    chunks.append(chunk)
                return resp.status_code, b"".join(chunks)
        except httpx.TimeoutException as exc:
            if until is not None and time.monotonic() >= until - 1e-3:
                raise DeadlinePassed(f"the deadline passed while prometheus was asked: {exc}") from None
            raise TelemetryUnavailable(f"prometheus unreachable: {exc}") from None
        except httpx.HTTPError as exc:
            raise TelemetryUnavailable(f"prometheus unreachable: {exc}") from None

    def _late(self, until: float | None, deadline: float) -> TelemetryUnavailable:
        if until is not None and deadline >= until:
            return DeadlinePassed("the deadline passed while prometheus answered")
        return TelemetryUnavailable(f"prometheus did not answer within {self._timeout_s} s")

    def sum_range(
        self, query: str, start_s: int, end_s: int, step_s: int, *, deadline: float | None = None
    ) -> list[tuple[float, float]]:
        """``(time, value)``: the sum over a range query's series at each step (a step no series has a value at is
        left out; a point outside the range is no step of it), at most ``MAX_POINTS`` steps, the latest kept. A value
        that is not finite and >= 0 raises TelemetryUnavailable (a rate or a count)."""
        if step_s <= 0 or end_s < start_s:
            raise ValidationError("range", "need step_s > 0 and end_s >= start_s")
        start_s = max(start_s, end_s - (MAX_POINTS - 1) * step_s)
        totals: dict[float, float] = {}
        for r in self.query_range(query, start_s, end_s, step_s, deadline=deadline):
            for point in r.get("values") or []:
                try:
                    t, v = float(point[0]), float(point[1])
                except (IndexError, TypeError, ValueError, OverflowError):
                    raise TelemetryUnavailable(f"malformed sample in the answer to {query!r}") from None
                if not math.isfinite(v) or v < 0:
                    raise TelemetryUnavailable(f"{query!r} gave {v} (need a finite value >= 0)")
                if not start_s <= t <= end_s:  # not a step of this query (NaN included): no point of the range
                    continue
                totals[t] = totals.get(t, 0.0) + v
        if not all(math.isfinite(v) for v in totals.values()):  # finite values whose sum overflowed
            raise TelemetryUnavailable(f"{query!r} summed to a value that is not finite")
        return sorted(totals.items())

    def sum_at(self, query: str, at_s: float, *, deadline: float | None = None) -> float | None:
        """The sum of an instant vector's values at ``at_s`` (e.g. a request rate); None when no series matched
        (no data is not zero). A non-finite or negative value raises TelemetryUnavailable."""
        result = self.query_at(query, at_s, deadline=deadline)
        if not result:
            return None
        total = 0.0
        for r in result:
            try:
                v = float(r["value"][1])
            except (KeyError, IndexError, TypeError, ValueError, OverflowError):
                raise TelemetryUnavailable(f"malformed sample in the answer to {query!r}") from None
            if not math.isfinite(v) or v < 0:
                raise TelemetryUnavailable(f"{query!r} gave {v} (need a finite value >= 0)")
            total += v
        if not math.isfinite(total):  # finite values whose sum overflowed
            raise TelemetryUnavailable(f"{query!r} summed to {total} (need a finite value >= 0)")
        return total

    def gpu_utilization(
        self,
        start_s: int,
        end_s: int,
        step_s: int,
        *,
        metric: str = GPU_UTIL,
        namespace: str | None = None,
        cluster: tuple[str, str] | None = None,
    ) -> TelemetryBatch:
        """Utilization (0..1) of every pod-attributed GPU series of ``metric`` in [start_s, end_s] at ``step_s``;
        ``cluster`` (label, value): only that cluster's series and those without the label (:func:`cluster_matcher`)."""
        builder = BatchBuilder()
        for result in self._pod_ranges(metric, start_s, end_s, step_s, namespace, cluster):
            add_matrix(builder, metric, result)
        return builder.build()

    def _pod_ranges(
        self, metric: str, start_s: int, end_s: int, step_s: int, namespace: str | None, cluster: tuple[str, str] | None
    ) -> list[list[dict[str, Any]]]:
        """The matrix results of ``metric``'s pod-attributed series over [start_s, end_s], in chunks of at most
        ``MAX_POINTS`` steps."""
        if step_s <= 0 or end_s < start_s:
            raise ValidationError("range", "need step_s > 0 and end_s >= start_s")
        selector = 'pod!=""' + (f',namespace="{_label_value(namespace)}"' if namespace else "")
        if cluster is not None:
            selector += "," + cluster_matcher(*cluster)
        query = f"{metric}{{{selector}}}"
        out: list[list[dict[str, Any]]] = []
        chunk_s = MAX_POINTS * step_s
        t = start_s
        while t <= end_s:
            stop = min(end_s, t + chunk_s - step_s)
            out.append(self.query_range(query, t, stop, step_s))
            t = stop + step_s
        return out

    def gpu_memory_gb(
        self,
        start_s: int,
        end_s: int,
        step_s: int,
        *,
        metric: str = GPU_FB_USED,
        namespace: str | None = None,
        cluster: tuple[str, str] | None = None,
    ) -> dict[tuple[str, str], float]:
        """Per (namespace, pod): the most GPU memory it used at one step of [start_s, end_s], summed over its devices,
        in GB (``metric`` in MiB / 1024). A sample that is not a finite number >= 0 is no measurement; a pod without
        one is left out (not measured, never 0). Pods sharing a device (time-slicing) each count the whole device's
        memory: more than their share, never less. ``cluster`` as in :meth:`gpu_utilization`."""
        used: dict[tuple[tuple[str, str], float], dict[str, float]] = {}  # (pod, t) -> device -> MiB
        for result in self._pod_ranges(metric, start_s, end_s, step_s, namespace, cluster):
            builder = BatchBuilder()
            add_matrix(builder, metric, result)  # the shape checked, as utilization's
            for s in result:
                labels = {str(k): str(v) for k, v in s.get("metric", {}).items()}
                key = series_key(metric, labels)
                for point in s.get("values") or []:
                    v = float(point[1])
                    if math.isfinite(v) and v >= 0:
                        used.setdefault(((key.namespace, key.pod), float(point[0])), {})[key.device] = v
        peak: dict[tuple[str, str], float] = {}
        for (pod, _t), devices in used.items():
            peak[pod] = max(peak.get(pod, 0.0), sum(devices.values()) / 1024.0)
        return {pod: round(gb, 3) for pod, gb in sorted(peak.items())}
