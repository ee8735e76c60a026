"""A deterministic discrete-event engine.

Events sit in a heap ordered by ``(time_s, priority, sequence)``: ties in time resolve by priority, then by
the order they were scheduled, so the same inputs give the same run bit for bit (the SimPy 4 ordering).
Large pre-sorted arrival streams are merged lazily: each stream keeps at most one event in the heap.

Each event is one packed integer in the heap (``heapq`` of ints: an int comparison per sift step instead of a
tuple's), its fields from the high bits down: time, priority (4 bits), sequence (40 bits), kind (8 bits),
``a`` (32 bits, unsigned) and ``b`` (20 bits, offset by 2**19). The sequence number is unique, so the order of the
integers is the order of ``(time_s, priority, sequence)``; the fields below it never decide. A field out of its
range raises (:meth:`EventQueue.schedule`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Event = tuple[int, int, int, int, int, int]  # (time_s, priority, seq, kind, a, b)
Handler = Callable[[int, int, int], None]  # (time_s, a, b)

# the packed layout (low bits first): b + B_OFF (20 bits), a (32), kind (8), seq (40), priority (4), time
_B_BITS, _A_BITS, _K_BITS, _S_BITS, _P_BITS = 20, 32, 8, 40, 4
_B_OFF = 1 << (_B_BITS - 1)
_B_MASK = (1 << _B_BITS) - 1
_A_MASK = (1 << _A_BITS) - 1
_K_MASK = (1 << _K_BITS) - 1
_S_MASK = (1 << _S_BITS) - 1
_P_MASK = (1 << _P_BITS) - 1
_A_SHIFT = _B_BITS
_K_SHIFT = _A_SHIFT + _A_BITS
_S_SHIFT = _K_SHIFT + _K_BITS
_P_SHIFT = _S_SHIFT + _S_BITS
_T_SHIFT = _P_SHIFT + _P_BITS


def pack(time_s: int, priority: int, seq: int, kind: int, a: int, b: int) -> int:
    """One event as its heap integer (the fields' ranges are checked)."""
    if not (0 <= priority <= _P_MASK and 0 <= seq <= _S_MASK and 0 <= kind <= _K_MASK):
        raise ValueError(f"event field out of range: priority {priority}, seq {seq}, kind {kind}")
    if not (0 <= a <= _A_MASK and -_B_OFF <= b < _B_OFF):
        raise ValueError(f"event argument out of range: a {a}, b {b}")
    return time_s << _T_SHIFT | priority << _P_SHIFT | seq << _S_SHIFT | kind << _K_SHIFT | a << _A_SHIFT | (b + _B_OFF)


def unpack(x: int) -> Event:
    """The event tuple ``(time_s, priority, seq, kind, a, b)`` of a heap integer."""
    return (
        x >> _T_SHIFT,
        x >> _P_SHIFT & _P_MASK,
        x >> _S_SHIFT & _S_MASK,
        x >> _K_SHIFT & _K_MASK,
        x >> _A_SHIFT & _A_MASK,
        (x & _B_MASK) - _B_OFF,
    )


@dataclass(slots=True)
class _Stream:
    times: Sequence[int]
    kind: int
    priority: int
    pos: int = 0


@dataclass(slots=True)
class EventQueue:
    _heap: list[int] = field(default_factory=list)
    _seq: int = 0
    _streams: list[_Stream] = field(default_factory=list)
    now_s: int = 0
    processed: int = 0

    def schedule(self, time_s: int, kind: int, a: int = 0, b: int = 0, priority: int = 5) -> None:
        """Schedule an event; scheduling into the past is a bug and raises."""
        if time_s < self.now_s:
            raise ValueError(f"event kind {kind} scheduled at {time_s} < now {self.now_s}")
        self._seq = seq = self._seq + 1
        if 0 <= a <= _A_MASK and -_B_OFF <= b < _B_OFF and 0 <= priority <= _P_MASK and kind <= _K_MASK:
            heapq.heappush(
                self._heap,
                time_s << _T_SHIFT
                | priority << _P_SHIFT
                | seq << _S_SHIFT
                | kind << _K_SHIFT
                | a << _A_SHIFT
                | (b + _B_OFF),
            )
        else:  # out of range: pack() raises with the field
            heapq.heappush(self._heap, pack(time_s, priority, seq, kind, a, b))

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
            heapq.heappush(self._heap, pack(int(st.times[st.pos]), st.priority, self._seq, st.kind, st.pos, -1 - sid))
            st.pos += 1

    def pop(self) -> Event | None:
        if not self._heap:
            return None
        ev = unpack(heapq.heappop(self._heap))
        if ev[5] < 0:
            sid = -1 - ev[5]
            self._push_stream(sid, self._streams[sid])
        self.now_s = ev[0]
        self.processed += 1
        return ev

    def pop_until(self, stop_s: int) -> Event | None:
        """:meth:`pop` if the next event is at or before ``stop_s`` (else None, the queue unchanged)."""
        heap = self._heap
        if not heap or heap[0] >> _T_SHIFT > stop_s:
            return None
        return self.pop()

    def dispatch(self, stop_s: int, handlers: Sequence[Handler]) -> None:
        """Pop every event up to ``stop_s`` in order and call ``handlers[kind](time_s, a, b)`` for each: the run's
        hot loop (:meth:`pop_until` inlined; the same events in the same order, the same sequence numbers)."""
        heap, streams = self._heap, self._streams
        pop, push = heapq.heappop, heapq.heappush
        # every event at or before stop_s is below this integer (time stop_s + 1, every lower field 0)
        bound = (stop_s + 1) << _T_SHIFT
        t_shift, k_shift, a_shift = _T_SHIFT, _K_SHIFT, _A_SHIFT
        k_mask, a_mask, b_mask, b_off = _K_MASK, _A_MASK, _B_MASK, _B_OFF
        done = 0
        try:
            while heap and heap[0] < bound:
                x = pop(heap)
                t = x >> t_shift
                b = (x & b_mask) - b_off
                if b < 0:  # a stream event: put the stream's next one in the heap (as _push_stream)
                    st = streams[-1 - b]
                    if st.pos < len(st.times):
                        self._seq += 1
                        push(heap, pack(int(st.times[st.pos]), st.priority, self._seq, st.kind, st.pos, b))
                        st.pos += 1
                self.now_s = t
                done += 1
                handlers[x >> k_shift & k_mask](t, x >> a_shift & a_mask, b)
        finally:
            self.processed += done

    def peek_time(self) -> int | None:
        return self._heap[0] >> _T_SHIFT if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
