"""List+watch informers: a local cache of one resource kind that follows the API server.

Protocol (as client-go's reflector): LIST (paged, ``limit``) to get the objects and the list's
``resourceVersion``; WATCH from that version; apply ADDED/MODIFIED/DELETED, remember each event's version
(and BOOKMARK versions); when a watch ends (server timeout), re-WATCH from the last version; on ``410 Gone``
(version too old, compacted) or a broken connection, re-LIST. Every ``resync_s`` the cache is re-LISTed
anyway (a missed event cannot live forever). ``on_change`` is called after each applied change.

Thread-safety: one background thread per informer; :meth:`Informer.snapshot` returns a copy under a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gpufleet.adapters.kubernetes.rest import JSON, ApiError, Kube


def obj_key(obj: JSON) -> str:
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Informer:
    """Cache of the objects at ``path`` (e.g. ``/api/v1/pods``); see the module docstring."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        *,
        resync_s: float = 300.0,
        watch_timeout_s: int = 60,
        page_size: int = 500,
        on_change: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.path = path
        self.resync_s = resync_s
        self.watch_timeout_s = watch_timeout_s
        self.page_size = page_size
        self.on_change = on_change
        self.clock = clock
        self._objs: dict[str, JSON] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self.resource_version = ""
        self.lists = 0  # LISTs done (initial + resync + after 410 / errors)
        self.gone = 0  # 410 Gone answers seen
        self.errors = 0
        self._need_list = True
        self._next_resync = 0.0

    # -- cache -------------------------------------------------------------------------------------------
    def snapshot(self) -> list[JSON]:
        with self._lock:
            return list(self._objs.values())

    def get(self, key: str) -> JSON | None:
        with self._lock:
            return self._objs.get(key)

    def wait_synced(self, timeout_s: float = 30.0) -> bool:
        return self._synced.wait(timeout_s)

    # -- protocol ----------------------------------------------------------------------------------------
    def relist(self) -> None:
        objs: dict[str, JSON] = {}
        cont = ""
        while True:
            q: dict[str, Any] = {"limit": self.page_size}
            if cont:
                q["continue"] = cont
            page = self.kube.get(self.path, **q)
            for o in page.get("items") or []:
                objs[obj_key(o)] = o
            cont = page.get("metadata", {}).get("continue", "")
            if not cont:
                break
        with self._lock:
            self._objs = objs
            self.resource_version = str(page.get("metadata", {}).get("resourceVersion", ""))
        self.lists += 1
        self._synced.set()
        if self.on_change:
            self.on_change()

    def apply(self, event: JSON) -> None:
        typ = event.get("type")
        obj = event.get("object") or {}
        rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
        if typ == "ERROR":
            code = int(obj.get("code", 0))
            raise ApiError(code, str(obj.get("reason", "")), str(obj.get("message", "")))
        with self._lock:
            if typ in ("ADDED", "MODIFIED"):
                self._objs[obj_key(obj)] = obj
            elif typ == "DELETED":
                self._objs.pop(obj_key(obj), None)
            if rv:
                self.resource_version = rv
        if typ != "BOOKMARK" and self.on_change:
            self.on_change()

    def run_once(self, deadline: float) -> None:
        """Watch until the stream ends or ``deadline`` (monotonic) passes; raises ApiError on 410 etc."""
        timeout = max(1, min(self.watch_timeout_s, int(deadline - self.clock()) + 1))
        for ev in self.kube.watch(self.path, self.resource_version, timeout):
            self.apply(ev)
            if self._stop.is_set() or self.clock() >= deadline:
                return

    def step(self) -> None:
        """One round of the loop: (re)LIST if needed or due, then WATCH until the stream ends or resync is due.

        A 410 Gone (our version was compacted away) or any other failure marks the cache for a re-LIST."""
        try:
            if self._need_list or self.clock() >= self._next_resync:
                self.relist()
                self._need_list = False
                self._next_resync = self.clock() + self.resync_s
            self.run_once(self._next_resync)
        except ApiError as exc:
            self.errors += 1
            if exc.status == 410:
                self.gone += 1
            self._need_list = True
            if exc.status != 410:
                self._stop.wait(0.5)
        except Exception:  # a malformed event must not kill the informer: re-list
            self.errors += 1
            self._need_list = True
            self._stop.wait(0.5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.step()

    def start(self) -> Informer:
        self._thread = threading.Thread(target=self._loop, name=f"informer{self.path}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
