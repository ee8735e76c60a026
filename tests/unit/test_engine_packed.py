"""The event heap's packed integers (sim/engine.py): the same order as the event tuples, fields round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.sim.engine import EventQueue, pack, unpack

_event = st.tuples(
    st.integers(0, 10**9),  # time
    st.integers(0, 15),  # priority
    st.integers(0, 2**40 - 1),  # seq
    st.integers(0, 255),  # kind
    st.integers(0, 2**32 - 1),  # a
    st.integers(-(2**19), 2**19 - 1),  # b
)


@settings(max_examples=300, deadline=None)
@given(_event, _event)
def test_packed_order_is_tuple_order(x: tuple[int, ...], y: tuple[int, ...]) -> None:
    assert unpack(pack(*x)) == x
    if x[:3] != y[:3]:  # (time, priority, seq) decide; seq is unique in a queue
        assert (pack(*x) < pack(*y)) == (x[:3] < y[:3])


def test_out_of_range_raises() -> None:
    q = EventQueue()
    for bad in ({"a": -1}, {"a": 2**32}, {"b": 2**19}, {"b": -(2**19) - 1}, {"priority": 16}):
        with pytest.raises(ValueError):
            q.schedule(1, 0, **bad)
    q = EventQueue()
    q.schedule(5, 3, 7, 2, priority=1)
    q.schedule(5, 2, 9, 4, priority=0)
    assert q.peek_time() == 5
    assert q.pop() == (5, 0, 2, 2, 9, 4)
    assert q.pop_until(4) is None
    assert q.pop_until(5) == (5, 1, 1, 3, 7, 2)
    assert q.pop() is None
