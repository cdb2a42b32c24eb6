"""Clocks for the read path: the real monotonic clock and a virtual one for tests."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class MonotonicClock:
    """``time.monotonic``."""

    def now(self) -> float:
        return time.monotonic()


class VirtualClock:
    """A clock that moves only when :meth:`advance` is called (thread-safe)."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> None:
        """Move forward by ``seconds`` (negative values are rejected)."""
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        with self._lock:
            self._t += seconds
