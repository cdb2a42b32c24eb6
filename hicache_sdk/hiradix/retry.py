"""Prefetch retries (0.5.23 ``StoragePrefetchRetries``, spec 5.1, 5.3, 5.5).

* A prefetch that ends without L3 benefit for a reason that may change arms a *paced
  retry*: rate-limited at submission (``capacity``), a hit below the threshold after the
  query (a miss or a backend failure counts as 0), or host memory short (``host_pool_full``).
  The span being too short before the query, a timeout and a cancel arm none.
* The retry re-issues the L3 lookup after ``prefetch_retry_poll_interval`` scheduling passes
  (here: admission polls of that request), at most ``prefetch_retry_max_attempts`` times.
  While one is armed, a new ``prefetch_from_storage`` for the request exits early.
* A request with an armed retry waits for it in the queue; the queue head never does (it is
  admitted with whatever the device and host hold), and after the last attempt nothing is
  armed, so the request is admitted.
* When the ``timeout`` policy's wait expired, the request's wait budget is spent: no retry is
  armed and later prefetches for it exit early.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RetryState:
    passes: int = 0  # scheduling passes (admission polls) seen
    attempts: int = 0  # retries re-issued
    due: int | None = None  # pass at which the armed retry fires; None: none armed
    expired: bool = False


class Retries:
    """Per-request retry bookkeeping (scheduler thread only)."""

    def __init__(self, config: Any) -> None:
        self.cfg = config
        self._s: dict[str, RetryState] = {}
        self.reissued_total = 0

    def arm(self, req_id: str) -> bool:
        """Arm a paced retry unless the budget is spent; ``True`` when armed."""
        r = self._s.setdefault(req_id, RetryState())
        if r.expired or r.attempts >= self.cfg.prefetch_retry_max_attempts:
            r.due = None
            return False
        r.due = r.passes + self.cfg.prefetch_retry_poll_interval
        return True

    def pending(self, req_id: str) -> bool:
        r = self._s.get(req_id)
        return r is not None and r.due is not None

    def expired(self, req_id: str) -> bool:
        r = self._s.get(req_id)
        return r is not None and r.expired

    def expire(self, req_id: str) -> None:
        r = self._s.setdefault(req_id, RetryState())
        r.expired, r.due = True, None

    def attempts(self, req_id: str) -> int:
        r = self._s.get(req_id)
        return 0 if r is None else r.attempts

    def tick(self, req_id: str) -> bool:
        """One scheduling pass for ``req_id``; ``True`` when its armed retry is due now
        (it is disarmed and counted as an attempt: the caller re-issues the lookup)."""
        r = self._s.get(req_id)
        if r is None:
            return False
        r.passes += 1
        if r.due is None or r.passes < r.due:
            return False
        r.due = None
        r.attempts += 1
        self.reissued_total += 1
        return True

    def forget(self, req_id: str) -> None:
        """The request was admitted or went away."""
        self._s.pop(req_id, None)
