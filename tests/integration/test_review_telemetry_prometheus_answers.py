"""Review (hostile): what the Prometheus adapter (adapters/telemetry_prometheus.py) does with answers a real
Prometheus never gives but a broken proxy, a wrong URL or a stalled server does.

The upstream is a tiny HTTP server on loopback that answers each request with what the test hands it: a real
Prometheus cannot be made to answer garbage, and this is the socket the adapter reads in production.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpufleet.adapters.kubernetes.workloads import deployment_rates
from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry, TelemetryUnavailable
from gpufleet.control.observation import DeclaredServing, ObservedDeployment
from gpufleet.domain.workloads import ServingScaling

Answer = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def upstream(answer: Answer) -> Iterator[str]:
    """Serve ``answer`` on a free loopback port; yield the base URL; stop on exit."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer(self)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def json_answer(body: Any) -> Answer:
    def answer(h: BaseHTTPRequestHandler) -> None:
        raw = json.dumps(body).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    return answer


def _vector(*values: str) -> dict[str, Any]:
    result = [{"metric": {"pod": f"p{i}"}, "value": [100.0, v]} for i, v in enumerate(values)]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_a_trickling_prometheus_is_cut_at_the_timeout() -> None:
    """Review (fixed), the defect: ``PrometheusTelemetry`` passes ``timeout_s`` to httpx, whose read timeout bounds
    each read of the socket, not the answer. A Prometheus (or a proxy before it) that sends its answer a byte at a
    time, each byte within the timeout, holds the caller for as long as it likes: with a 0.5 s timeout this answer of
    ~100 bytes at one byte every 0.1 s takes 10 s. The scaling worker and the usage meter read Prometheus one query
    after another (scaling.py: "up to 10 s a query"): such a server stalled them without bound. Fixed: the answer is
    read against a deadline of ``timeout_s``, checked at every chunk."""
    raw = json.dumps(_vector("5")).encode()

    def trickle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.flush()
        for i in range(len(raw)):
            try:
                h.wfile.write(raw[i : i + 1])
                h.wfile.flush()
            except OSError:  # the client gave up
                return
            time.sleep(0.1)

    assert len(raw) >= 80
    with upstream(trickle) as url, PrometheusTelemetry(url, timeout_s=0.5) as prom:
        t0 = time.monotonic()
        with pytest.raises(TelemetryUnavailable):
            prom.sum_at("q", 100.0)
        assert time.monotonic() - t0 < 3.0


NOT_PROMETHEUS = {
    "a JSON list": [],
    "a JSON string": "ok",
    "data is a list": {"status": "success", "data": []},
    "result is a number": {"status": "success", "data": {"resultType": "vector", "result": 5}},
    "result holds strings": {"status": "success", "data": {"resultType": "matrix", "result": ["x"]}},
}


@pytest.mark.parametrize("case", sorted(NOT_PROMETHEUS))
def test_an_answer_of_another_shape_is_telemetry_unavailable(case: str) -> None:
    """Review (fixed), the defect: ``_result`` calls ``body.get`` and ``data.get`` and ``list(result)`` on whatever
    JSON came back (and ``sum_range`` calls ``r.get`` on each series): a JSON list, a string, or a ``data`` that is
    not an object raises AttributeError or TypeError instead of TelemetryUnavailable. ``deployment_rates`` catches
    only TelemetryUnavailable, so the scaling round fails whole (every Deployment unscaled, audited as
    ``scaling_round_failed``) instead of each Deployment being skipped as ``telemetry_unavailable``. Fixed: an answer
    that is not an object whose data holds a list of series is TelemetryUnavailable."""
    with upstream(json_answer(NOT_PROMETHEUS[case])) as url, PrometheusTelemetry(url) as prom:
        with pytest.raises(TelemetryUnavailable):
            prom.sum_at("q", 100.0)
        with pytest.raises(TelemetryUnavailable):
            prom.sum_range("q", 0, 600, 60)
        dep = ObservedDeployment("ns", "web", 2, 2, serving=DeclaredServing(ServingScaling(1, 4, 10.0)))
        rates, errors = deployment_rates(prom, [dep], 100.0, "q")
        assert rates == {} and set(errors) == {("ns", "web")}


def test_the_sum_of_finite_rates_that_overflows_is_refused() -> None:
    """Review (fixed), the defect: ``sum_at`` and ``sum_range`` check that each series' value is finite and >= 0,
    then add them: two series of 1e308 requests/s sum to +Inf, handed to the replica policy as the Deployment's rate
    (the policy then sizes for an infinite load: every replica up to max_replicas). Fixed: a sum that is not finite
    is TelemetryUnavailable, not a rate."""
    with (
        upstream(json_answer(_vector("1e308", "1e308"))) as url,
        PrometheusTelemetry(url) as prom,
        pytest.raises(TelemetryUnavailable, match="finite"),
    ):
        prom.sum_at("q", 100.0)
    matrix = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {"pod": f"p{i}"}, "values": [[60, "1e308"]]} for i in range(2)],
        },
    }
    with (
        upstream(json_answer(matrix)) as url,
        PrometheusTelemetry(url) as prom,
        pytest.raises(TelemetryUnavailable, match="finite"),
    ):
        prom.sum_range("q", 0, 60, 60)


def test_a_flood_of_an_answer_is_cut_at_a_size() -> None:
    """Review (fixed), the defect: ``_result`` reads the whole answer into memory (``resp.json()``) whatever its
    size: a server that streams 1 GiB of whitespace without a Content-Length (a proxy's loop, a hostile upstream;
    over loopback that is about a second) has the controller hold it all, then fail it as "non-JSON". Nothing
    Prometheus answers to the adapter's queries is that big. Fixed: past ``MAX_ANSWER_BYTES`` the answer is refused,
    naming the limit."""
    block = b" " * (1 << 20)

    def flood(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Connection", "close")
        h.end_headers()
        for _ in range(1024):  # 1 GiB, then the server stops by itself
            try:
                h.wfile.write(block)
            except OSError:  # the client gave up
                return

    with (
        upstream(flood) as url,
        PrometheusTelemetry(url, timeout_s=60.0) as prom,
        pytest.raises(TelemetryUnavailable, match="bytes"),
    ):
        prom.sum_at("q", 100.0)


def test_a_range_answer_holds_only_the_steps_asked_for() -> None:
    """Review (fixed), the defect: ``sum_range`` sums every point of the answer, whatever its time: an answer (a
    proxy's cache of another query, a hostile upstream) with points at -5 s and at 10**12 s (the year 33658) beside
    the asked steps 0..540 hands them on, and the replica policy's warm-up (scaling.py ``_warm`` ->
    ``ReplicaScaler.warm``) replays each as a period decided then, one of them 31,000 years ahead of the clock.
    Fixed: a point outside the asked range is left out."""
    values = [[t, "1"] for t in [*range(0, 600, 60), 10**12, -5]]
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]}}
    with upstream(json_answer(matrix)) as url, PrometheusTelemetry(url) as prom:
        got = prom.sum_range("q", 0, 540, 60)
    assert [t for t, _ in got] == [float(t) for t in range(0, 600, 60)]
