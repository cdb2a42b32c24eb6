"""Cancel tokens: zero-copy transfers that still honour a deadline.

A transfer abandoned at its deadline keeps running on its worker thread (Python threads
cannot be killed), so normally it must not touch the caller's memory: the resilience layer
stages it. A transport whose every touch of caller memory is a call that cannot block (a
non-blocking socket's ``recv_into`` after ``poll``, ``preadv`` with ``RWF_NOWAIT``) may
declare ``cancellable = True`` and receive a :class:`CancelToken` instead. It wraps each such
touch in ``with cancel.guard():``, which raises :class:`~hicache_sdk.errors.Cancelled` when
the token is already cancelled. :meth:`CancelToken.cancel` takes the same lock, so once
``cancel()`` has returned no guarded section is running and none will start: no byte of caller
memory is touched again. A connection whose call was cancelled mid-reply must be discarded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import Cancelled

__all__ = ["CancelToken"]


class CancelToken:
    """One transfer's cancellation flag and the lock its memory touches run under."""

    __slots__ = ("_cancelled", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Cancel; returns only once no guarded section is running (waits for the one in
        progress, which cannot block). Idempotent."""
        with self._lock:
            self._cancelled = True

    def check(self) -> None:
        """Raise :class:`Cancelled` if cancelled (a cheap check between steps)."""
        if self._cancelled:
            raise Cancelled()

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Run the body (one non-blocking touch of caller memory) under the token's lock;
        raise :class:`Cancelled` instead when the token is cancelled."""
        with self._lock:
            if self._cancelled:
                raise Cancelled()
            yield

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self._cancelled})"
