"""Cancel tokens: zero-copy transfers that still honour a deadline.

A transfer abandoned at its deadline keeps running on its worker thread (Python threads
cannot be killed), so normally it must not touch the caller's memory: the resilience layer
stages it. A transport whose every touch of caller memory is a call that cannot block (a
non-blocking socket's ``recv_into`` after ``poll``, ``preadv`` with ``RWF_NOWAIT``) may
declare ``cancellable = True`` and receive a :class:`CancelToken` instead. It wraps each such
touch in ``with cancel.guard():``, which raises :class:`~hicache_sdk.errors.Cancelled` when
the token is already cancelled. :meth:`CancelToken.cancel` takes the guards' locks, so once
``cancel()`` has returned no guarded section is running and none will start: no byte of caller
memory is touched again. A connection whose call was cancelled mid-reply must be discarded.

One transfer may run on several threads at once (a batch split over connections): each
thread guards with its own lock (a *lane*), so the parts' copies never wait for each other;
``cancel()`` sets the flag, then takes every lane's lock in turn.

A touch that *can* block qualifies too when something can make it return at once: the
transport registers that with :meth:`CancelToken.on_cancel` (a blocking socket receive
into a page, ended by ``shutdown()`` of its socket). ``cancel()`` runs every such
interrupter before it waits for the guards, so it still returns promptly, and the
connection that was interrupted is discarded (``on_cancel``'s remover says whether it ran).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from ..errors import Cancelled

__all__ = ["CancelToken"]


class _Lane:
    """One thread's guard: a context manager over that thread's lock."""

    __slots__ = ("_lock", "_token")

    def __init__(self, token: CancelToken) -> None:
        self._lock = threading.Lock()
        self._token = token

    def __enter__(self) -> None:
        self._lock.acquire()
        if self._token._cancelled:
            self._lock.release()
            raise Cancelled()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.release()


def _run_quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # an interrupter's failure must not stop the cancel
        pass


def _ran() -> bool:
    return True


class CancelToken:
    """One transfer's cancellation flag and the locks its memory touches run under."""

    __slots__ = ("_cancelled", "_interrupters", "_lanes", "_lanes_lock")

    def __init__(self) -> None:
        self._cancelled = False
        self._lanes: dict[int, _Lane] = {}
        self._lanes_lock = threading.Lock()
        self._interrupters: dict[object, Callable[[], None]] = {}

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Cancel; returns only once no guarded section is running (runs the interrupters,
        then waits for the sections in progress, which cannot block or were just ended by an
        interrupter). Idempotent."""
        with self._lanes_lock:
            self._cancelled = True  # a lane made from now on sees the flag at its first entry
            lanes = list(self._lanes.values())
            for fn in self._interrupters.values():
                _run_quietly(fn)
        for lane in lanes:
            with lane._lock:
                pass

    def on_cancel(self, interrupt: Callable[[], None]) -> Callable[[], bool]:
        """Register ``interrupt``, run by :meth:`cancel` before it waits for the guards: it
        must not block, and must make a guarded call that is blocking return promptly (shut
        down the socket it waits on). Already cancelled: it runs now. Returns the remover,
        to call once the guarded calls it covers are over; the remover returns whether
        ``interrupt`` ran (the resource it acts on is then unusable: discard it). Under the
        token's lock, so an interrupter never runs after its remover has returned."""
        key = object()
        with self._lanes_lock:
            if self._cancelled:
                _run_quietly(interrupt)
                return _ran
            self._interrupters[key] = interrupt

        def remove() -> bool:
            with self._lanes_lock:
                self._interrupters.pop(key, None)
                return self._cancelled

        return remove

    def check(self) -> None:
        """Raise :class:`Cancelled` if cancelled (a cheap check between steps)."""
        if self._cancelled:
            raise Cancelled()

    def guard(self) -> _Lane:
        """A context manager that runs its body (one non-blocking touch of caller memory)
        under this thread's lock of the token, or raises :class:`Cancelled` instead when
        the token is cancelled."""
        lane = self._lanes.get(threading.get_ident())
        if lane is None:
            with self._lanes_lock:
                lane = self._lanes.setdefault(threading.get_ident(), _Lane(self))
        return lane

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self._cancelled})"
