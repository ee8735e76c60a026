"""A deterministic discrete-event engine.

Events sit in a heap ordered by ``(time_s, priority, sequence)``: ties in time resolve by priority, then by
the order they were scheduled, so the same inputs give the same run bit for bit (the SimPy 4 ordering).
Large pre-sorted arrival streams are merged lazily: each stream keeps at most one event in the heap.

Each event's order is one integer key in the heap (``heapq`` of ints: an int comparison per sift step instead
of a tuple's): ``time_s << 36 | priority << 32 | seq`` (priority below 16, sequence below 2**32: checked), and
its ``(kind, a, b)`` waits in a dict under that key (the sequence number makes every key distinct).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Event = tuple[int, int, int, int, int, int]  # (time_s, priority, seq, kind, a, b)
Handler = Callable[[int, int, int], None]  # (time_s, a, b)

_P_SHIFT = 32  # the key's layout (low bits first): seq (32 bits), priority (4), time
_T_SHIFT = 36
_S_MASK = (1 << _P_SHIFT) - 1
_P_MASK = 15


def pack(time_s: int, priority: int, seq: int) -> int:
    """An event's heap key (the fields' ranges are checked)."""
    if not (0 <= priority <= _P_MASK and 0 <= seq <= _S_MASK and time_s >= 0):
        raise ValueError(f"event key out of range: time {time_s}, priority {priority}, seq {seq}")
    return time_s << _T_SHIFT | priority << _P_SHIFT | seq


def unpack(key: int) -> tuple[int, int, int]:
    """``(time_s, priority, seq)`` of a heap key."""
    return key >> _T_SHIFT, key >> _P_SHIFT & _P_MASK, key & _S_MASK


@dataclass(slots=True)
class _Stream:
    times: Sequence[int]
    kind: int
    priority: int
    pos: int = 0


@dataclass(slots=True)
class EventQueue:
    _heap: list[int] = field(default_factory=list)
    _events: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # key -> (kind, a, b)
    _seq: int = 0
    _streams: list[_Stream] = field(default_factory=list)
    now_s: int = 0
    processed: int = 0

    def schedule(self, time_s: int, kind: int, a: int = 0, b: int = 0, priority: int = 5) -> None:
        """Schedule an event; scheduling into the past is a bug and raises."""
        if time_s < self.now_s:
            raise ValueError(f"event kind {kind} scheduled at {time_s} < now {self.now_s}")
        self._seq = seq = self._seq + 1
        if 0 <= priority <= _P_MASK and seq <= _S_MASK:
            key = time_s << _T_SHIFT | priority << _P_SHIFT | seq
        else:  # out of range: pack() raises with the field
            key = pack(time_s, priority, seq)
        heapq.heappush(self._heap, key)
        self._events[key] = (kind, a, b)

    def add_stream(self, times: Sequence[int], kind: int, priority: int = 5) -> None:
        """A pre-sorted stream of events of one kind; event ``i`` carries ``a=i``."""
        sid = len(self._streams)
        st = _Stream(times, kind, priority)
        self._streams.append(st)
        self._push_stream(sid, st)

    def _push_stream(self, sid: int, st: _Stream) -> None:
        if st.pos < len(st.times):
            self._seq += 1
            key = pack(int(st.times[st.pos]), st.priority, self._seq)
            heapq.heappush(self._heap, key)
            # b = -1 - sid marks a stream event so pop() can advance the stream
            self._events[key] = (st.kind, st.pos, -1 - sid)
            st.pos += 1

    def pop(self) -> Event | None:
        if not self._heap:
            return None
        key = heapq.heappop(self._heap)
        kind, a, b = self._events.pop(key)
        t, prio, seq = unpack(key)
        if b < 0:
            sid = -1 - b
            self._push_stream(sid, self._streams[sid])
        self.now_s = t
        self.processed += 1
        return (t, prio, seq, kind, a, b)

    def pop_until(self, stop_s: int) -> Event | None:
        """:meth:`pop` if the next event is at or before ``stop_s`` (else None, the queue unchanged)."""
        heap = self._heap
        if not heap or heap[0] >> _T_SHIFT > stop_s:
            return None
        return self.pop()

    def dispatch(self, stop_s: int, handlers: Sequence[Handler]) -> None:
        """Pop every event up to ``stop_s`` in order and call ``handlers[kind](time_s, a, b)`` for each: the run's
        hot loop (:meth:`pop_until` inlined; the same events in the same order, the same sequence numbers)."""
        heap, events, streams = self._heap, self._events, self._streams
        pop, push, take = heapq.heappop, heapq.heappush, events.pop
        bound = (stop_s + 1) << _T_SHIFT  # every key at or before stop_s is below it
        t_shift = _T_SHIFT
        done = 0
        try:
            while heap and heap[0] < bound:
                key = pop(heap)
                kind, a, b = take(key)
                t = key >> t_shift
                if b < 0:  # a stream event: put the stream's next one in the heap (as _push_stream)
                    st = streams[-1 - b]
                    if st.pos < len(st.times):
                        self._seq += 1
                        nxt = pack(int(st.times[st.pos]), st.priority, self._seq)
                        push(heap, nxt)
                        events[nxt] = (st.kind, st.pos, b)
                        st.pos += 1
                self.now_s = t
                done += 1
                handlers[kind](t, a, b)
        finally:
            self.processed += done

    def peek_time(self) -> int | None:
        return self._heap[0] >> _T_SHIFT if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
