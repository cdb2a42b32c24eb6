"""Run a blocking call under a deadline on a bounded set of daemon worker threads.

Python threads cannot be cancelled, so a call that outlives its deadline is *abandoned*:
the caller gets control back, the worker keeps running it to the end, and the call's
``on_late`` hook runs in the worker once it ends (that is where memory the abandoned I/O
could still touch -- staging buffers, quarantined slots -- is finally released).

Edge cases:

* a call abandoned before a worker picked it up is skipped (never started); ``on_late``
  still runs, with ``started=False``;
* a call that completes in the instant between "wait timed out" and "mark abandoned" is
  treated as completed in time (the decision is taken under the call's lock, so exactly one
  of "caller uses the result" and "``on_late`` runs" happens, never both, never neither);
* workers are daemon threads: a hung transport call never blocks interpreter exit;
* a call goes to the worker that went idle *last* (a stack, not a queue): back-to-back
  calls run on the same warm thread. Native clients may keep per-thread state, and a
  thread that just ran is in the CPU's caches (``docs/resilience.md``, Workers);
* with ``follow_caller_cpu=True`` (an opt-in; Linux), the worker is woken on the caller's
  CPU: the caller sleeps while it waits, so the worker takes over its CPU instead of waking
  another one (on a VM an idle vCPU takes 50-200 us to wake). The caller narrows the idle
  worker's affinity to its own CPU just before waking it, and the worker gives itself its
  own mask back (from when it started) before it runs the call: the pin lasts only the
  hand-off, so a call is never held to one CPU, and a thread that the call starts (a
  client's connection pool, say) inherits the full mask, not the pin. An ``OSError`` (a
  cpuset that changed) turns it off for the runner. Off (the default), no thread's
  affinity is ever changed;
* exceptions raised by the function are captured and returned to the waiter
  (:attr:`Call.error`); an exception in a late call is dropped (the waiter is gone);
* at interpreter exit (``atexit``, registered when the first runner is made, never on
  import; it runs before finalization starts) every live runner gets up
  to ``HICACHE_EXIT_DRAIN_S`` seconds in all (default 5) for its running and abandoned
  calls to end (:func:`drain_all`). A daemon thread still inside native code when the
  interpreter finalizes is killed by a forced unwind that C++ frames (torch, pybind11
  clients such as Mooncake's) turn into ``std::terminate``: the process dies of
  ``SIGABRT`` ("terminate called without an active exception"; measured here with a late
  call in a torch loop: exit status -6 without the drain, 0 with it). A call still
  running after the bound can still do that; nothing short of waiting for it can help.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Call", "DeadlineRunner", "PyDeadlineRunner", "drain_all", "exit_drain_s"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Baton:
    """A binary hand-off signal: a lock held while no post is pending. Every baton here
    sees at most one pending post."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def post(self) -> None:
        self._lock.release()

    def wait(self, timeout: float) -> bool:
        """Take the pending post, waiting at most ``timeout`` seconds (``< 0``: no limit)."""
        return self._lock.acquire(True, -1 if timeout < 0 else timeout)


def post_wait(post: Baton, wait: Baton, timeout: float) -> bool:
    """``post.post()``, then ``wait.wait(timeout)``: one side of a hand-off."""
    post.post()
    return wait.wait(timeout)


def _sched_getcpu() -> Callable[[], int] | None:
    """libc's ``sched_getcpu`` (the CPU the calling thread runs on), or ``None``."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):  # pragma: no cover - not glibc/musl
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = []
    return fn  # type: ignore[no-any-return]


_current_cpu: Callable[[], int] | None = _sched_getcpu()


def can_follow_cpu() -> bool:
    """Whether workers can be placed on the caller's CPU here (Linux)."""
    return _current_cpu is not None and hasattr(os, "sched_setaffinity") and _current_cpu() >= 0


class Call(Generic[T]):
    """One submitted function call and its outcome."""

    __slots__ = ("_done", "_fn", "_lock", "abandoned", "error", "finished", "on_late", "result", "started")

    def __init__(self, fn: Callable[[], T], on_late: Callable[[Call[T]], None] | None) -> None:
        self._fn = fn
        self._lock = threading.Lock()
        # "done" is posted once, when the call ends; a waiter that got it posts it again for
        # the next (a lock hand-off, cheaper than an Event, whose wait builds a Condition).
        self._done = Baton()
        self.on_late = on_late
        self.result: T | None = None
        self.error: BaseException | None = None
        self.started = False
        self.finished = False
        self.abandoned = False

    def wait_done(self, timeout: float | None = None) -> bool:
        """Wait for the call to end (regardless of abandonment); True when it has."""
        return self._wait(timeout)

    def _wait(self, timeout: float | None, wake: Baton | None = None) -> bool:
        """Wait for ``_done``; with ``wake``, post it first."""
        t = -1.0 if timeout is None else max(timeout, 0.0)
        if self._done.wait(t) if wake is None else post_wait(wake, self._done, t):
            self._done.post()  # let every other waiter through too
            return True
        return False


class _Worker:
    """One worker thread's hand-off slot: ``call`` is set and ``wake`` released by the
    runner; the worker sleeps on ``wake`` while idle. Made by the worker thread itself:
    ``tid`` is its native id, ``mask`` its CPU affinity at start, ``cpu`` the one CPU it is
    pinned to (``-1``: not pinned)."""

    __slots__ = ("call", "cpu", "mask", "tid", "wake")

    def __init__(self, follow: bool) -> None:
        self.call: Call[object] | None = None
        self.wake = Baton()
        self.tid = threading.get_native_id()
        self.mask: set[int] = os.sched_getaffinity(0) if follow else set()
        self.cpu = -1


class DeadlineRunner:
    """A bounded pool of daemon threads running :class:`Call` objects (module docs).

    ``max_workers`` bounds the threads (they start lazily). ``on_abandon_change(n)`` is
    called (outside any lock) whenever the number of abandoned, still-running calls changes.
    ``follow_caller_cpu`` (default ``False``; honoured where :func:`can_follow_cpu`) places a
    call's worker on the caller's CPU (module docs).
    """

    def __init__(
        self,
        max_workers: int,
        *,
        name: str = "hicache-io",
        on_abandon_change: Callable[[int], None] | None = None,
        follow_caller_cpu: bool = False,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers!r}")
        self._max = max_workers
        self._name = name
        self._lock = threading.Lock()
        self._started = 0  # worker threads started
        self._idle: list[_Worker] = []  # a stack: the last worker to go idle is reused first
        self._backlog: collections.deque[Call[object]] = collections.deque()  # no worker free
        self._pending = 0  # submitted and not yet finished (abandoned or not)
        self._abandoned = 0
        self._all_done = threading.Condition(self._lock)
        self._on_abandon_change = on_abandon_change
        self._shutdown = False
        self._follow = bool(follow_caller_cpu) and can_follow_cpu()
        _live.add(self)
        _drain_at_exit_once()

    @property
    def follows_caller_cpu(self) -> bool:
        """Whether a call's worker is placed on the caller's CPU (see the module docs)."""
        return self._follow

    @property
    def abandoned(self) -> int:
        """Abandoned calls that have not ended yet."""
        with self._lock:
            return self._abandoned

    @property
    def pending(self) -> int:
        """Submitted calls that have not ended yet (abandoned or not)."""
        with self._lock:
            return self._pending

    def submit(self, fn: Callable[[], T], on_late: Callable[[Call[T]], None] | None = None) -> Call[T]:
        """Hand ``fn`` to a worker (the most recently idle one); raises ``RuntimeError``
        after :meth:`shutdown`."""
        call: Call[T] = Call(fn, on_late)
        worker = self._assign(call)
        if worker is not None:
            worker.wake.post()
        return call

    def run(
        self, fn: Callable[[], T], timeout: float, on_late: Callable[[Call[T]], None] | None = None
    ) -> tuple[bool, Call[T]]:
        """:meth:`submit` and :meth:`wait` in one: ``(in_time, call)``."""
        call: Call[T] = Call(fn, on_late)
        worker = self._assign(call)
        in_time = call._wait(timeout, None if worker is None else worker.wake) or self._abandon(call)
        return in_time, call

    def _assign(self, call: Call[T]) -> _Worker | None:
        """Give ``call`` to the idle worker returned (placed on this CPU; the caller wakes
        it), to a new worker thread, or to the backlog (both: ``None``)."""
        item: Call[object] = call  # type: ignore[assignment]
        worker: _Worker | None = None
        spawn = False
        with self._lock:
            if self._shutdown:
                raise RuntimeError("runner is shut down")
            self._pending += 1
            if self._idle:
                worker = self._idle.pop()
                worker.call = item
            elif self._started < self._max:
                self._started += 1
                spawn = True
            else:
                self._backlog.append(item)
        if worker is not None:
            if self._follow:
                self._place(worker)
            return worker
        if spawn:
            t = threading.Thread(
                target=self._worker, args=(item,), name=f"{self._name}-{self._started - 1}", daemon=True
            )
            t.start()
        return None

    def _place(self, w: _Worker) -> None:
        """Pin the idle worker ``w`` (this caller's alone until it runs) to the caller's CPU
        until it wakes."""
        cpu = _current_cpu() if _current_cpu is not None else -1
        if cpu < 0:
            return
        try:
            os.sched_setaffinity(w.tid, (cpu,))
            w.cpu = cpu
        except OSError as e:  # e.g. a cpuset changed under us: stop following
            self._follow = False
            log.debug("deadline runner: not placing workers on the caller's CPU (%s)", e)

    @staticmethod
    def _unpin(w: _Worker) -> None:
        """Give ``w`` its own CPU mask back."""
        if w.cpu < 0:
            return
        w.cpu = -1
        try:
            os.sched_setaffinity(w.tid, w.mask)
        except OSError:
            pass

    def wait(self, call: Call[T], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds. True: the call ended in time and its
        ``result``/``error`` are the caller's. False: the call is now abandoned and its
        ``on_late`` hook will run when it ends."""
        return call._wait(timeout) or self._abandon(call)

    def _abandon(self, call: Call[T]) -> bool:
        """The wait timed out: mark ``call`` abandoned, unless it finished in the meantime
        (then True: the result is the caller's)."""
        with call._lock:
            if call.finished:
                return True
            call.abandoned = True
        with self._lock:
            self._abandoned += 1
            n = self._abandoned
        self._abandon_changed(n)
        return False

    def _worker(self, first: Call[object]) -> None:
        me = _Worker(self._follow)
        item: Call[object] | None = first
        while item is not None:
            if me.cpu >= 0:
                self._unpin(me)  # woken on the caller's CPU; what it runs is not pinned
            late = self._run(item)
            with self._lock:
                self._pending -= 1
                self._all_done.notify_all()
                nxt = self._backlog.popleft() if self._backlog else None
                stop = nxt is None and self._shutdown
                if nxt is None and not stop:
                    self._idle.append(me)
            # the waiter wakes only now, with this worker back on the idle stack: its next
            # call comes straight back to this (warm) thread
            if nxt is not None or stop:
                if not late:
                    item._done.post()
                if stop:
                    return
                item = nxt
                continue
            # posted by submit()/run() (with a call) or shutdown() (None)
            if late:
                me.wake.wait(-1.0)
            else:
                post_wait(item._done, me.wake, -1.0)
            item, me.call = me.call, None

    def _run(self, call: Call[object]) -> bool:
        """Run ``call`` (unless abandoned before it started); True when it ended abandoned
        (its waiter is gone: ``on_late`` has run and ``_done`` is released here)."""
        with call._lock:
            skip = call.abandoned
            call.started = not skip
        if not skip:
            try:
                call.result = call._fn()
            except BaseException as e:  # captured for the waiter; never kills the worker
                call.error = e
        with call._lock:
            call.finished = True
            late = call.abandoned
        if not late:
            return False
        call._done.post()
        try:
            if call.on_late is not None:
                call.on_late(call)
        except Exception:  # nobody to report to; the worker must live on
            log.exception("deadline runner: on_late hook failed")
        finally:
            with self._lock:
                self._abandoned -= 1
                n = self._abandoned
        self._abandon_changed(n)
        return True

    def _abandon_changed(self, n: int) -> None:
        if self._on_abandon_change is None:
            return
        try:
            self._on_abandon_change(n)
        except Exception:  # a gauge's failure must not stop the caller or kill a worker
            log.exception("deadline runner: on_abandon_change hook failed")

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every submitted call to end; True if they did."""
        end = time.monotonic() + max(timeout, 0.0)
        with self._lock:
            while self._pending > 0:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._all_done.wait(left)
            return True

    def shutdown(self) -> None:
        """Refuse new calls and let idle workers exit. Busy workers finish their call (and
        the backlog) first (they are daemon threads; nobody joins them). Idempotent."""
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            idle, self._idle = self._idle, []
        for w in idle:
            w.call = None
            w.wake.post()


#: The former name of :class:`DeadlineRunner` (when a native core existed beside it).
PyDeadlineRunner = DeadlineRunner


_live: weakref.WeakSet[DeadlineRunner] = weakref.WeakSet()  # every runner not yet collected


def drain_all(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds in all for every call on every live runner to end;
    ``True`` if they did (module docs: run at interpreter exit)."""
    end = time.monotonic() + max(timeout, 0.0)
    done = True
    for runner in list(_live):
        done = runner.drain(max(end - time.monotonic(), 0.0)) and done
    return done


def exit_drain_s() -> float:
    """``HICACHE_EXIT_DRAIN_S``: what :func:`drain_all` gets at interpreter exit (seconds)."""
    raw = os.environ.get("HICACHE_EXIT_DRAIN_S", "5")
    try:
        return max(float(raw), 0.0)
    except ValueError:
        log.warning("HICACHE_EXIT_DRAIN_S=%r is not a number of seconds; using 5", raw)
        return 5.0


def _drain_at_exit() -> None:
    if _live and not drain_all(exit_drain_s()):
        log.debug("interpreter exit: calls still running after HICACHE_EXIT_DRAIN_S")


_exit_hook = threading.Lock()  # held once the atexit hook is registered


def _drain_at_exit_once() -> None:
    """Register :func:`_drain_at_exit` with ``atexit``, the first time a runner is made."""
    if _exit_hook.acquire(blocking=False):
        atexit.register(_drain_at_exit)
