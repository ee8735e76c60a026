"""Group commit: requests for the same key that arrive while one batch for that key is being decided wait, and
are then decided together in the next batch, in one transaction with one commit.

Used by budget admission, where every admission of a team must hold the team's budget row lock (so concurrent
requests cannot both take the last dollars): one transaction per request would serialize requests on the lock
and on one WAL flush each; a batch pays the lock, the figures and the flush once. Decisions inside a batch are
made one after the other, each seeing what the previous ones booked, so the outcome is the same as one
transaction per request in arrival order. A batch holds at most ``max_batch`` requests.

Leader/follower: the first request for an idle key leads (runs batches); later ones wait. When the leader's
own batch is done and more requests are queued, the first of them is woken to lead the next batch, so no
request waits for more than the batch in flight plus its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Slot(Generic[T, R]):
    __slots__ = ("error", "finished", "item", "lead", "result", "wake")

    def __init__(self, item: T) -> None:
        self.item = item
        self.result: R | None = None
        self.error: BaseException | None = None
        self.finished = False
        self.lead = False
        self.wake = threading.Event()


class GroupCommit(Generic[T, R]):
    def __init__(self, run_batch: Callable[[str, Sequence[T]], Sequence[R | BaseException]], max_batch: int = 64):
        """``run_batch(key, items)`` returns one result (or exception) per item, in order."""
        self._run = run_batch
        self._max = max_batch
        self._lock = threading.Lock()
        self._queues: dict[str, list[_Slot[T, R]]] = {}
        self._active: set[str] = set()

    def submit(self, key: str, item: T) -> R:
        """Decide ``item`` in a batch of its key; returns its result or raises its exception."""
        slot: _Slot[T, R] = _Slot(item)
        with self._lock:
            self._queues.setdefault(key, []).append(slot)
            if key not in self._active:
                self._active.add(key)
                slot.lead = True
        while not slot.finished:
            if slot.lead:
                self._drive(key)
            else:
                slot.wake.wait()
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]

    def _drive(self, key: str) -> None:
        with self._lock:
            queue = self._queues.get(key, [])
            batch, rest = queue[: self._max], queue[self._max :]
            self._queues[key] = rest
        try:
            results: Sequence[R | BaseException] = self._run(key, [s.item for s in batch])
        except BaseException as exc:  # the batch failed as a whole (e.g. the database): every request sees it
            results = [exc] * len(batch)
        for s, r in zip(batch, results, strict=True):
            if isinstance(r, BaseException):
                s.error = r
            else:
                s.result = r
            s.finished = True
            s.lead = False
            s.wake.set()
        with self._lock:
            waiting = self._queues.get(key, [])
            if waiting:
                waiting[0].lead = True  # the next batch is led by the first request waiting for it
                waiting[0].wake.set()
            else:
                self._queues.pop(key, None)
                self._active.discard(key)
