"""A thin JSON-over-HTTPS client for the Kubernetes API, configured by the official ``kubernetes`` package.

The official client loads the kubeconfig or the in-cluster service-account config (auth, CA, client certs,
exec plugins); requests then go out as raw JSON through one pooled ``urllib3.PoolManager``, which is
thread-safe. Generated model classes are skipped on purpose: (de)serialising them costs more CPU than the
request itself at hundreds of binds per second (docs/kubernetes.md, "Why this client").

Errors: a non-2xx answer raises :class:`ApiError` carrying the HTTP status, the server's ``Status`` message, its
``details.causes`` (``reason: message`` each: the Eviction API names a refusing PodDisruptionBudget there) and the
``Retry-After`` header in seconds (the max-in-flight and priority-and-fairness filters' 429); transport errors and a watch line that is not JSON raise :class:`ApiError` with status 0; a 2xx answer
that is not a JSON object (a proxy's HTML page) raises it with reason ``NotJSON``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """The API server refused a request (``status`` is the HTTP code; 0 = no answer). ``causes``: the ``Status``
    object's ``details.causes`` as ``reason: message``; ``retry_after_s``: the ``Retry-After`` header in whole
    seconds (None: absent, or not a number of seconds)."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        causes: tuple[str, ...] = (),
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.causes = causes
        self.retry_after_s = retry_after_s


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` header's delay in seconds: a non-negative whole number (the form the API server sends);
    None for an HTTP date or anything else."""
    text = (value or "").strip()
    return float(text) if text.isdigit() and len(text) <= 9 else None


def status_causes(status: Any) -> tuple[str, ...]:
    """``details.causes`` of a ``Status`` object as ``reason: message`` strings (the first 8, each cut to 300)."""
    details = status.get("details") if isinstance(status, dict) else None
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return ()
    out = [f"{c.get('reason', '')}: {c.get('message', '')}"[:300] for c in causes[:8] if isinstance(c, dict)]
    return tuple(out)


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """Where the API server is and how to authenticate (filled from a kubeconfig or in-cluster files)."""

    server: str
    token: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify_tls: bool = True


def load_config(kubeconfig: str | None, *, in_cluster: bool = False, context: str | None = None) -> KubeConfig:
    """Read a kubeconfig (``kubeconfig`` path) or the in-cluster service account with the official client."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if in_cluster:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)  # type: ignore[no-untyped-call]
    auth = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
    token = auth.removeprefix("Bearer ").strip() if auth else None
    return KubeConfig(
        server=str(cfg.host).rstrip("/"),
        token=token,
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        verify_tls=bool(cfg.verify_ssl),
    )


class Kube:
    """JSON requests against one API server. ``pool_size`` bounds concurrent connections (threads share it)."""

    def __init__(self, cfg: KubeConfig, *, pool_size: int = 32, timeout_s: float = 30.0) -> None:
        self.cfg = cfg
        self.timeout_s = timeout_s
        kw: dict[str, Any] = {"maxsize": pool_size, "block": True, "retries": False}
        if cfg.server.startswith("https"):
            kw["cert_reqs"] = "CERT_REQUIRED" if cfg.verify_tls else "CERT_NONE"
            if cfg.ca_file:
                kw["ca_certs"] = cfg.ca_file
            if cfg.cert_file:
                kw["cert_file"] = cfg.cert_file
                kw["key_file"] = cfg.key_file
        if not cfg.verify_tls:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._http = urllib3.PoolManager(num_pools=4, **kw)
        self._headers = {"Accept": "application/json", "User-Agent": "gpufleet"}
        if cfg.token:
            self._headers["Authorization"] = f"Bearer {cfg.token}"
        self.requests_sent = 0
        self._lock = threading.Lock()

    @staticmethod
    def from_kubeconfig(path: str | None, *, in_cluster: bool = False, pool_size: int = 32) -> Kube:
        return Kube(load_config(path, in_cluster=in_cluster), pool_size=pool_size)

    def close(self) -> None:
        self._http.clear()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout_s: float | None = None,
    ) -> JSON:
        url = self.cfg.server + path + (("?" + urlencode(query)) if query else "")
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        with self._lock:
            self.requests_sent += 1
        try:
            resp = self._http.request(
                method, url, body=data, headers=headers, timeout=timeout_s or self.timeout_s, preload_content=True
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(0, "Unreachable", str(exc)) from None
        raw = resp.data
        try:
            got = json.loads(raw) if raw else {}
        except ValueError:
            got = None
        if resp.status >= 300:
            wait = retry_after_s(resp.headers.get("Retry-After"))
            if isinstance(got, dict):
                raise ApiError(resp.status, str(got.get("reason", "")), str(got.get("message", "")),
                               causes=status_causes(got), retry_after_s=wait)  # fmt: skip
            raise ApiError(resp.status, "", raw[:300].decode(errors="replace"), retry_after_s=wait)
        if not isinstance(got, dict):  # a proxy's HTML page, a truncated body: never a half-read object
            raise ApiError(resp.status, "NotJSON", raw[:300].decode(errors="replace"))
        return got

    def get(self, path: str, **query: Any) -> JSON:
        return self.request("GET", path, query=query or None)

    def post(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body)

    def put(self, path: str, body: JSON) -> JSON:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: JSON, content_type: str = MERGE_PATCH) -> JSON:
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str) -> JSON:
        return self.request("DELETE", path)

    def watch(self, path: str, resource_version: str, timeout_s: int) -> Iterator[JSON]:
        """Stream watch events (``{"type", "object"}``) from ``resource_version`` for up to ``timeout_s``."""
        q = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": str(timeout_s)}
        q["allowWatchBookmarks"] = "true"
        url = self.cfg.server + path + "?" + urlencode(q)
        try:
            resp = self._http.request(
                "GET",
                url,
                headers=self._headers,
                preload_content=False,
                timeout=urllib3.Timeout(connect=10.0, read=timeout_s + 10.0),
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(0, "Unreachable", str(exc)) from None
        try:
            if resp.status >= 300:
                raw = resp.read()
                raise ApiError(resp.status, "", raw[:300].decode(errors="replace"))
            buf = b""
            for chunk in resp.stream(65536):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        try:
                            event = json.loads(line)
                        except ValueError:
                            raise ApiError(0, "WatchBroken", line[:300].decode(errors="replace")) from None
                        yield event
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(0, "WatchBroken", str(exc)) from None
        finally:
            resp.release_conn()
