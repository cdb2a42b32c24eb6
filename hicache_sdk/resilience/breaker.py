"""A circuit breaker: after repeated failures, calls fail fast until a probe succeeds.

States (exported as the gauge ``breaker_state``):

* ``"closed"``: calls go through; ``failures`` consecutive failures open it;
* ``"open"``: calls are refused; after ``reset_s`` (measured on the injectable ``clock``)
  the next :meth:`CircuitBreaker.allow` becomes the single *probe* and the state is
  ``"half_open"``;
* ``"half_open"``: one probe is in flight, every other call is refused; the probe's
  success closes the breaker, its failure re-opens it for another ``reset_s``.

A *hold* (:meth:`CircuitBreaker.set_held`) forces ``"open"`` regardless of failures -- the
resilience layer holds the breaker while the abandoned-call budget is exhausted and
releases it when abandoned calls drain; releasing returns to the underlying state.

Two plain attributes let a hot path skip the lock: ``passing`` (``allow()`` would answer
``(True, False)``: closed and not held) and ``quiet`` (passing with no failure counted, so
``record_success()`` would change nothing). They are rewritten under the lock at every
change and read without it: a reader racing a change sees the state just before or just
after it, which a breaker's counting tolerates.

Edge cases: a probe that is never reported (the caller died) would wedge the breaker in
``half_open``; so a probe older than ``reset_s`` is considered lost and another is allowed.
``reset_s == 0`` lets a probe through on every call while open.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "CircuitBreaker"]

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"


class CircuitBreaker:
    """Thread-safe breaker. ``on_state(state)`` is called (outside the lock) on changes of
    the visible state."""

    def __init__(
        self,
        failures: int,
        reset_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        start_open: bool = False,
        on_state: Callable[[str], None] | None = None,
    ) -> None:
        if failures < 1:
            raise ValueError(f"failures must be >= 1, got {failures!r}")
        if reset_s < 0:
            raise ValueError(f"reset_s must be >= 0, got {reset_s!r}")
        self._threshold = failures
        self._reset_s = reset_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state = OPEN if start_open else CLOSED
        self._consecutive = 0
        self._opened_at = clock()
        self._probe_at = 0.0
        self._held = False
        self._on_state = on_state
        self._last_visible = self._state
        self.passing = self._state == CLOSED
        self.quiet = self.passing

    @property
    def state(self) -> str:
        """The visible state (``"open"`` while held)."""
        with self._lock:
            return OPEN if self._held else self._state

    @property
    def held(self) -> bool:
        with self._lock:
            return self._held

    def allow(self) -> tuple[bool, bool]:
        """Ask to make a call: ``(allowed, is_probe)``. A probe's outcome must be reported
        with :meth:`record_success` / :meth:`record_failure`."""
        with self._lock:
            if self._held:
                return False, False
            if self._state == CLOSED:
                return True, False
            now = self._clock()
            if self._state == OPEN:
                if now - self._opened_at < self._reset_s:
                    return False, False
            elif now - self._probe_at < self._reset_s:
                return False, False  # half-open with a live probe
            self._state = HALF_OPEN
            self._probe_at = now
            changed = self._changed_locked()
        self._notify(changed)
        return True, True

    def record_success(self) -> None:
        """A call (or probe) succeeded: reset the failure count; a probe closes the breaker."""
        with self._lock:
            if self._state == CLOSED and self._consecutive == 0:
                return  # the hot path: nothing changes
            self._consecutive = 0
            if self._state == HALF_OPEN:
                self._state = CLOSED
            changed = self._changed_locked()
        self._notify(changed)

    def record_failure(self) -> None:
        """A call failed: count it; at the threshold (or on a failed probe) open."""
        with self._lock:
            self._consecutive += 1
            if self._state == HALF_OPEN or (self._state == CLOSED and self._consecutive >= self._threshold):
                self._state = OPEN
                self._opened_at = self._clock()
            changed = self._changed_locked()
        self._notify(changed)

    def trip(self) -> None:
        """Open now (e.g. the service was unreachable at start)."""
        with self._lock:
            self._state = OPEN
            self._opened_at = self._clock()
            changed = self._changed_locked()
        self._notify(changed)

    def set_held(self, held: bool) -> None:
        """Force (or stop forcing) the open state."""
        with self._lock:
            self._held = held
            changed = self._changed_locked()
        self._notify(changed)

    def _changed_locked(self) -> str | None:
        self.passing = self._state == CLOSED and not self._held
        self.quiet = self.passing and self._consecutive == 0
        visible = OPEN if self._held else self._state
        if visible == self._last_visible:
            return None
        self._last_visible = visible
        return visible

    def _notify(self, changed: str | None) -> None:
        if changed is not None and self._on_state is not None:
            self._on_state(changed)
