"""An HTTP server on loopback in a daemon thread (the tests' fakes of cloud APIs)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    """Start ``handler`` on a free loopback port; returns the server and its root URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def stop(server: ThreadingHTTPServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()


JsonHandle = Callable[[str, str, str | None, bytes], tuple[int, Any, float]]
NO_BODY = object()  # an answer without a body (``Content-Length: 0``), e.g. ARM's 200 to a DELETE
JsonAnswer = tuple[int, Any, float, dict[str, str]]  # (status, JSON or NO_BODY, delay_s, extra response headers)
JsonHeadersHandle = Callable[[str, str, str | None, bytes], JsonAnswer]


def serve_json(handle: JsonHandle) -> tuple[ThreadingHTTPServer, str]:
    """Serve every HTTP method with ``handle(verb, target, authorization, body) -> (status, JSON, delay_s)``: the
    answer is sent after ``delay_s`` seconds (a late answer; a client gone meanwhile is ignored)."""
    return serve_json_headers(lambda verb, target, auth, raw: (*handle(verb, target, auth, raw), {}))


def serve_json_headers(handle: JsonHeadersHandle) -> tuple[ThreadingHTTPServer, str]:
    """As ``serve_json``, with ``handle(...) -> (status, JSON or NO_BODY, delay_s, headers)``: the headers (e.g.
    ``Retry-After``, ``Azure-AsyncOperation``) are added to the answer."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, out, delay, headers = handle(self.command, self.path, self.headers.get("Authorization"), raw)
            if delay:
                time.sleep(delay)
            data = b"" if out is NO_BODY else json.dumps(out).encode()
            try:
                self.send_response(status)
                if out is not NO_BODY:
                    self.send_header("Content-Type", "application/json; charset=UTF-8")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _any  # noqa: N815

        def log_message(self, *_: Any) -> None:
            pass

    return serve(Handler)
