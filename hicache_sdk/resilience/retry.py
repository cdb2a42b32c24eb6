"""Retrying an I/O failure within the deadline: :class:`Retry` and its back-off policies.

``Retry(ExponentialBackoff(base_s=0.01, cap_s=0.2), 2)`` -- back-off first, then the number of
retries, as redis-py's ``redis.retry.Retry(backoff, retries)`` -- repeats a transport
call that failed for an I/O reason (see :func:`hicache_sdk.transport.is_io_error`) at most
``retries`` more times, sleeping ``backoff.compute(n)`` before attempt ``n + 1``. It never
starts an attempt, and never sleeps, past the deadline of the call it serves: a retry costs
the caller no time beyond that deadline. A bug (any other exception), ``ValueError`` and
:class:`~hicache_sdk.errors.Cancelled` are never retried, and neither is an answer (a miss is
an answer, not a failure).

The default, ``Retry()``, makes one attempt: the resilience layer retries nothing unless a
backend or a user injects a policy (``Resilience(retry=...)``).
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ..errors import Cancelled

__all__ = ["Backoff", "ConstantBackoff", "ExponentialBackoff", "NoBackoff", "Retry"]

T = TypeVar("T")


class Backoff(ABC):
    """How long to sleep before the next attempt."""

    @abstractmethod
    def compute(self, failures: int) -> float:
        """Seconds to sleep after ``failures`` (>= 1) failed attempts."""


@dataclass(frozen=True)
class NoBackoff(Backoff):
    """Retry at once."""

    def compute(self, failures: int) -> float:
        return 0.0


@dataclass(frozen=True)
class ConstantBackoff(Backoff):
    """The same sleep before every retry."""

    seconds: float

    def __post_init__(self) -> None:
        if not self.seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {self.seconds!r}")

    def compute(self, failures: int) -> float:
        return self.seconds


@dataclass(frozen=True)
class ExponentialBackoff(Backoff):
    """``min(cap_s, base_s * 2 ** (failures - 1))``; with ``jitter``, a uniform draw between
    half of that and all of it (spreads the retries of many callers apart)."""

    base_s: float = 0.01
    cap_s: float = 1.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if not self.base_s >= 0 or not self.cap_s >= 0:
            raise ValueError(f"base_s and cap_s must be >= 0, got {self.base_s!r}, {self.cap_s!r}")

    def compute(self, failures: int) -> float:
        s = min(self.cap_s, self.base_s * 2 ** max(failures - 1, 0))
        return random.uniform(s / 2, s) if self.jitter else s


@dataclass(frozen=True)
class Retry:
    """At most ``retries`` more attempts after an I/O failure, ``backoff`` apart (module docs).
    The arguments are in redis-py's order: ``Retry(backoff, retries)``."""

    backoff: Backoff = field(default_factory=NoBackoff)
    retries: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.backoff, int) and not isinstance(self.backoff, bool):
            raise ValueError(
                f"Retry takes the back-off first, then the retries (redis-py's order since "
                f"hicache-sdk 0.2.0): Retry(NoBackoff(), {self.backoff!r}) or Retry(retries={self.backoff!r})"
            )
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {self.retries!r}")
        if not isinstance(self.backoff, Backoff):
            raise ValueError(f"backoff must be a Backoff, got {type(self.backoff).__name__}")

    def call(
        self,
        fn: Callable[[], T],
        *,
        is_io: Callable[[BaseException], bool],
        until: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_retry: Callable[[BaseException], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> T:
        """``fn()``, repeated after an I/O failure while retries are left and the next
        attempt would start before ``until`` (a ``clock()`` time; ``None``: no bound).
        ``on_retry(exc)`` is called for each failure that is retried; the last failure
        propagates."""
        failures = 0
        while True:
            try:
                return fn()
            except Exception as e:
                failures += 1
                if failures > self.retries or isinstance(e, (Cancelled, ValueError)) or not is_io(e):
                    raise
                pause = self.backoff.compute(failures)
                if until is not None and clock() + pause >= until:
                    raise
                if on_retry is not None:
                    on_retry(e)
                if pause > 0:
                    sleep(pause)
