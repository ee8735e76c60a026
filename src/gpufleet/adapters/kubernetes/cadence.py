"""The controller's cadences on its wall clock (``clock``, ``time.time`` in production; tests pass their own)."""

from __future__ import annotations


def due(now: float, next_at: float, every: float) -> bool:
    """Whether a cadence whose next run is ``next_at`` (its last run + ``every``) is due at ``now``: at or past it,
    or before its last run (``next_at - every``): a wall clock stepped back (NTP, a resumed VM) runs it now instead
    of pausing it for the size of the step."""
    return now >= next_at or now < next_at - every
