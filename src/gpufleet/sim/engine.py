"""A deterministic discrete-event engine.

Events sit in a heap ordered by ``(time_s, priority, sequence)``: ties in time resolve by priority, then by
the order they were scheduled, so the same inputs give the same run bit for bit (the SimPy 4 ordering).
Large pre-sorted arrival streams are merged lazily: each stream keeps at most one event in the heap.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Event = tuple[int, int, int, int, int, int]  # (time_s, priority, seq, kind, a, b)
Handler = Callable[[int, int, int], None]  # (time_s, a, b)


@dataclass(slots=True)
class _Stream:
    times: Sequence[int]
    kind: int
    priority: int
    pos: int = 0


@dataclass(slots=True)
class EventQueue:
    _heap: list[Event] = field(default_factory=list)
    _seq: int = 0
    _streams: list[_Stream] = field(default_factory=list)
    now_s: int = 0
    processed: int = 0

    def schedule(self, time_s: int, kind: int, a: int = 0, b: int = 0, priority: int = 5) -> None:
        """Schedule an event; scheduling into the past is a bug and raises."""
        if time_s < self.now_s:
            raise ValueError(f"event kind {kind} scheduled at {time_s} < now {self.now_s}")
        self._seq += 1
        heapq.heappush(self._heap, (time_s, priority, self._seq, kind, a, b))

    def add_stream(self, times: Sequence[int], kind: int, priority: int = 5) -> None:
        """A pre-sorted stream of events of one kind; event ``i`` carries ``a=i``."""
        sid = len(self._streams)
        st = _Stream(times, kind, priority)
        self._streams.append(st)
        self._push_stream(sid, st)

    def _push_stream(self, sid: int, st: _Stream) -> None:
        if st.pos < len(st.times):
            self._seq += 1
            # b = -1 - sid marks a stream event so pop() can advance the stream
            heapq.heappush(self._heap, (int(st.times[st.pos]), st.priority, self._seq, st.kind, st.pos, -1 - sid))
            st.pos += 1

    def pop(self) -> Event | None:
        if not self._heap:
            return None
        ev = heapq.heappop(self._heap)
        if ev[5] < 0:
            sid = -1 - ev[5]
            self._push_stream(sid, self._streams[sid])
        self.now_s = ev[0]
        self.processed += 1
        return ev

    def pop_until(self, stop_s: int) -> Event | None:
        """:meth:`pop` if the next event is at or before ``stop_s`` (else None, the queue unchanged)."""
        heap = self._heap
        if not heap or heap[0][0] > stop_s:
            return None
        ev = heapq.heappop(heap)
        if ev[5] < 0:
            sid = -1 - ev[5]
            self._push_stream(sid, self._streams[sid])
        self.now_s = ev[0]
        self.processed += 1
        return ev

    def dispatch(self, stop_s: int, handlers: Sequence[Handler]) -> None:
        """Pop every event up to ``stop_s`` in order and call ``handlers[kind](time_s, a, b)`` for each: the run's
        hot loop (:meth:`pop_until` inlined; the same events in the same order, the same sequence numbers)."""
        heap, streams = self._heap, self._streams
        pop, push = heapq.heappop, heapq.heappush
        done = 0
        try:
            while heap and heap[0][0] <= stop_s:
                t, _prio, _seq, kind, a, b = pop(heap)
                if b < 0:  # a stream event: put the stream's next one in the heap (as _push_stream)
                    st = streams[-1 - b]
                    if st.pos < len(st.times):
                        self._seq += 1
                        push(heap, (int(st.times[st.pos]), st.priority, self._seq, st.kind, st.pos, b))
                        st.pos += 1
                self.now_s = t
                done += 1
                handlers[kind](t, a, b)
        finally:
            self.processed += done

    def peek_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
