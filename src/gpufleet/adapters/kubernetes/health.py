"""The controller's health and metrics over HTTP (``gpufleet controller --health-port 8081``), for the kubelet's
liveness probe and for Prometheus.

* ``GET /healthz``: 200 while the controller's loop has turned within ``stale_s`` seconds (a follower's loop turns
  too: it waits for the Lease), else 503 saying how long ago; 503 once the loop has ended on an error (the process
  is about to exit), and while the Lease elector has failed on every round (an error the Lease client does not wrap)
  for more than ``stale_s`` seconds. The body is one line of text.
* ``GET /metrics``: the Prometheus exposition of the controller's own registry:

  ====================================================  =========  ============================================
  gpufleet_controller_actions_total{action,outcome}     counter    every audit record: bind, evict, scale,
                                                                   inventory_sync, usage_metered, ... by outcome
                                                                   (applied, dry_run, failed, skipped, ...)
  gpufleet_controller_leader                            gauge      1 while this replica holds the Lease
  gpufleet_controller_loop_age_seconds                  gauge      since the loop last turned
  gpufleet_controller_unschedulable_pods{reason}        gauge      the last plan's pods left pending, by reason
  gpufleet_controller_side_work_busy{kind}              gauge      1 while a store or scaling job waits or runs
  ====================================================  =========  ============================================

Anything else is a 404. The server runs on daemon threads and never touches the controller's state but to read it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

DEFAULT_STALE_S = 120.0


class ControllerHealth:
    """What ``/healthz`` and ``/metrics`` report: :meth:`turned` from the loop, :meth:`record` from every audit
    record; the rest (leader, the last plan, side work) is read at scrape time from ``probe``, a callable returning
    ``{"leader": bool, "unschedulable": {reason: pods}, "busy": {kind: bool}, "error": str}`` and, optionally,
    ``"elector_failing_s": float, "elector_error": str`` (how long the Lease elector has failed, and why)."""

    def __init__(self, probe: Callable[[], Mapping[str, Any]], *, stale_s: float = DEFAULT_STALE_S) -> None:
        self.stale_s = stale_s
        self._probe = probe
        self._turned = time.monotonic()
        self.registry = CollectorRegistry()
        self.actions = Counter(
            "gpufleet_controller_actions", "Audit records of the controller, by action and outcome",
            ["action", "outcome"], registry=self.registry,
        )  # fmt: skip
        self.registry.register(_Gauges(self))

    def turned(self) -> None:
        """The loop went round once."""
        self._turned = time.monotonic()

    def record(self, ev: Mapping[str, Any]) -> None:
        self.actions.labels(str(ev.get("action", "")), str(ev.get("outcome", ""))).inc()

    def age_s(self) -> float:
        return time.monotonic() - self._turned

    def probe(self) -> Mapping[str, Any]:
        return self._probe()

    def healthz(self) -> tuple[int, str]:
        p = self._probe()
        error = str(p.get("error", ""))
        if error:
            return 503, f"the controller's loop ended: {error}"
        failing = float(p.get("elector_failing_s") or 0.0)
        if failing > self.stale_s:
            why = p.get("elector_error") or "unknown error"
            return 503, f"the Lease elector has failed for {failing:.0f} s (more than {self.stale_s:.0f} s): {why}"
        age = self.age_s()
        if age > self.stale_s:
            return 503, f"the controller's loop last turned {age:.0f} s ago (more than {self.stale_s:.0f} s)"
        return 200, f"ok: the loop turned {age:.1f} s ago"


class _Gauges(Collector):
    def __init__(self, health: ControllerHealth) -> None:
        self.health = health

    def collect(self) -> Iterator[GaugeMetricFamily]:
        p = self.health.probe()
        yield GaugeMetricFamily("gpufleet_controller_leader", "1 while this replica holds the Lease",
                                value=1.0 if p.get("leader") else 0.0)  # fmt: skip
        yield GaugeMetricFamily("gpufleet_controller_loop_age_seconds", "Seconds since the loop last turned",
                                value=self.health.age_s())  # fmt: skip
        pending = GaugeMetricFamily("gpufleet_controller_unschedulable_pods",
                                    "Pods the last plan left pending, by reason", labels=["reason"])  # fmt: skip
        for reason, n in sorted(Tally(p.get("unschedulable", {})).items()):
            pending.add_metric([reason], float(n))
        yield pending
        busy = GaugeMetricFamily("gpufleet_controller_side_work_busy",
                                 "1 while a job of the kind waits or runs off the binding loop", labels=["kind"])  # fmt: skip
        for kind, b in sorted(p.get("busy", {}).items()):
            busy.add_metric([kind], 1.0 if b else 0.0)
        yield busy


class HealthServer:
    """``/healthz`` and ``/metrics`` on ``host:port`` (port 0: any free port; :attr:`port` says which)."""

    def __init__(self, health: ControllerHealth, port: int, host: str = "0.0.0.0") -> None:  # the probe: the pod's IP
        self.health = health
        h = health

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/healthz":
                    code, text = h.healthz()
                    self._send(code, "text/plain; charset=utf-8", (text + "\n").encode())
                elif self.path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(h.registry))
                else:
                    self._send(404, "text/plain; charset=utf-8", b"not found: /healthz and /metrics are served\n")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # probes every few seconds: no access log

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="health", daemon=True)

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
