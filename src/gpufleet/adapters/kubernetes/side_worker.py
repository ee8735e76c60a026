"""Work the controller keeps off its binding loop: a thread that runs jobs one at a time, at most one of each kind
waiting or running.

The binding loop must not wait on anything slower than the API server it binds through. The store (a statement
runs up to its timeout, 30 s by default) and Prometheus (10 s a query, several queries a Deployment) can hang; the
controller hands their work to a :class:`SideWorker` (``store_link.py`` for the store; replica scaling reads
Prometheus on another) and goes on. A job of a kind already waiting or running is not queued again, so a hung
dependency costs that kind's rounds, not a growing queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class SideWorker:
    """One daemon thread (named ``name``) running jobs, one job per kind at a time (a kind waiting or running is not
    queued again). ``on_error(kind, exc)`` is told of a job that raised; the worker goes on."""

    def __init__(self, name: str, on_error: Callable[[str, BaseException], None]) -> None:
        self._on_error = on_error
        self._jobs: dict[str, Callable[[], object]] = {}
        self._busy: set[str] = set()  # kinds waiting or running
        self._cv = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, kind: str, job: Callable[[], object]) -> bool:
        """Queue ``job`` unless a job of its kind is waiting or running (or the worker stops); True when queued."""
        with self._cv:
            if kind in self._busy or self._stopping:
                return False
            self._busy.add(kind)
            self._jobs[kind] = job
            self._cv.notify_all()
            return True

    def busy(self, kind: str) -> bool:
        with self._cv:
            return kind in self._busy

    @property
    def stopping(self) -> bool:
        """:meth:`stop` has been called (a job failing now may be one its owner's shutdown cut off)."""
        with self._cv:
            return self._stopping

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no job waits or runs (at most ``timeout_s``); True when idle."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def stop(self, timeout_s: float) -> bool:
        """Run what is queued, then end; a job still hanging after ``timeout_s`` is left to its daemon thread (its
        own timeout ends it). True when the thread ended."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._stopping:
                    self._cv.wait()
                if not self._jobs:
                    return
                kind = next(iter(self._jobs))
                job = self._jobs.pop(kind)
            try:
                job()
            except Exception as exc:  # a store, Prometheus or API call that failed: reported, the next cadence retries
                self._on_error(kind, exc)
            finally:
                with self._cv:
                    self._busy.discard(kind)
                    self._cv.notify_all()
