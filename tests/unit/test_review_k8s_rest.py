"""Review: what the Kubernetes client does with an answer that is not JSON."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.rest import ApiError, Kube, KubeConfig


class _Html(BaseHTTPRequestHandler):
    """A proxy / gateway in front of the API server answering 200 with an HTML page (e.g. a login page)."""

    def _answer(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = b"<html><body>Please sign in</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def html_server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_2xx_answer_that_is_not_json_is_an_api_error(html_server: str) -> None:
    """Review (fixed), the defect: Kube.request json.loads() a 2xx body unguarded (rest.py, ``out: JSON =
    json.loads(raw)``): a non-JSON answer raises a bare json.JSONDecodeError, not the documented ApiError."""
    kube = Kube(KubeConfig(server=html_server))
    with pytest.raises(ApiError):
        kube.get("/api/v1/nodes")


def test_a_bind_answered_with_non_json_is_recorded_not_raised(html_server: str) -> None:
    """Review (fixed), the defect (a consequence): Actuator._do only catches ApiError, so the JSONDecodeError escapes
    Actuator.bind; in the controller it escapes the bind worker, tick()'s ``f.result()`` and run(): the controller exits
    with a traceback instead of recording the failed write (outcome ``error``) and going on."""
    act = Actuator(Kube(KubeConfig(server=html_server)), sleep=lambda s: None)
    out = act.bind("ns", "p", "uid-1", "node-1", (0,), "placed")
    assert out not in ("applied",)
    assert act.audit and act.audit[-1]["outcome"] != "applied"
