"""The event heap's integer keys (sim/engine.py): the same order as ``(time, priority, seq)``, fields round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.sim.engine import EventQueue, pack, unpack

_key = st.tuples(st.integers(0, 10**9), st.integers(0, 15), st.integers(0, 2**32 - 1))


@settings(max_examples=300, deadline=None)
@given(_key, _key)
def test_key_order_is_tuple_order(x: tuple[int, int, int], y: tuple[int, int, int]) -> None:
    assert unpack(pack(*x)) == x
    assert (pack(*x) < pack(*y)) == (x < y)


def test_out_of_range_raises() -> None:
    with pytest.raises(ValueError):
        EventQueue().schedule(1, 0, priority=16)
    with pytest.raises(ValueError):
        pack(1, 0, 2**32)
    q = EventQueue()
    q.schedule(5, 3, 7, 2, priority=1)
    q.schedule(5, 2, 9, 4, priority=0)
    assert q.peek_time() == 5
    assert q.pop() == (5, 0, 2, 2, 9, 4)
    assert q.pop_until(4) is None
    assert q.pop_until(5) == (5, 1, 1, 3, 7, 2)
    assert q.pop() is None
    assert len(q) == 0
