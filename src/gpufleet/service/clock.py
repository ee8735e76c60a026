"""Clocks and id generators are passed in, never read from globals (tests run on fake time)."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_s(self) -> int:
        """Current UNIX time, whole seconds."""
        ...


class SystemClock:
    def now_s(self) -> int:
        return int(time.time())


class FixedClock:
    """A settable clock for tests and simulations."""

    def __init__(self, now_s: int) -> None:
        self._now_s = now_s

    def now_s(self) -> int:
        return self._now_s

    def set(self, now_s: int) -> None:
        self._now_s = now_s

    def advance(self, seconds: int) -> None:
        self._now_s += seconds


class IdGenerator(Protocol):
    def new(self, prefix: str) -> str:
        """A fresh id such as ``res_1a2b3c4d5e6f7a8b``."""
        ...


class RandomIds:
    def new(self, prefix: str) -> str:
        return f"{prefix}_{secrets.token_hex(8)}"


class SequentialIds:
    """Deterministic ids for tests: ``res_000001``, ``res_000002``, ..."""

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def new(self, prefix: str) -> str:
        with self._lock:
            self._n += 1
            return f"{prefix}_{self._n:06d}"
