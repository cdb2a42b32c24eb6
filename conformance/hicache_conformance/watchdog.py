"""Nothing in the suite waits forever.

* :class:`Watchdog`: a per-test time limit. In the main thread on POSIX it arms
  ``SIGALRM`` and raises :class:`WatchdogTimeout` inside the hung call (blocking sleeps,
  lock waits and socket reads are interrupted); everywhere it also arms
  ``faulthandler.dump_traceback_later`` a little later, so a hang that cannot be
  interrupted still leaves every thread's stack in the log.
* :func:`bounded_call`: run one backend call in a daemon thread and give up after a
  deadline. A call that never returns is abandoned (the thread keeps running); the
  caller gets :class:`CallTimeout` and the test fails instead of hanging.
* :func:`settle`: wait, bounded, for the calls :func:`bounded_call` abandoned. The suite
  settles after every test (so a late call never lands in the next test's state) and at
  interpreter exit: a thread still inside native code (torch, a pybind11 client) when the
  interpreter finalizes takes the process down with ``SIGABRT`` ("terminate called without
  an active exception"), seen here as a suite run that exited -6 instead of 1.
"""

from __future__ import annotations

import atexit
import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, TypeVar

__all__ = ["WatchdogTimeout", "CallTimeout", "Watchdog", "bounded_call", "settle"]

T = TypeVar("T")

#: How long, at interpreter exit, abandoned calls get to end (seconds, all together).
EXIT_SETTLE_S = 10.0

_abandoned: set[threading.Thread] = set()
_abandoned_lock = threading.Lock()


class WatchdogTimeout(AssertionError):
    """A whole test ran past its time limit (it fails rather than hangs)."""


class CallTimeout(AssertionError):
    """One backend call did not return within its deadline."""


class Watchdog:
    """Context manager that fails the enclosed block after ``seconds``.

    ``seconds <= 0`` disables it. Nested use in one thread is not supported (the
    inner one would replace the outer alarm). Outside the main thread, or where
    ``SIGALRM`` does not exist, only the traceback dump is armed.
    """

    def __init__(self, seconds: float, label: str = "test") -> None:
        self.seconds = seconds
        self.label = label
        self._armed_signal = False
        self._old_handler: Any = None

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        raise WatchdogTimeout(
            f"{self.label} ran past the conformance watchdog ({self.seconds:g} s): a backend call "
            "hung or the test's calls together took longer (stacks of all threads were dumped to stderr)"
        )

    def __enter__(self) -> Watchdog:
        if self.seconds <= 0:
            return self
        faulthandler.dump_traceback_later(self.seconds + 5.0, repeat=False, file=sys.stderr, exit=False)
        if hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread():
            self._old_handler = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self._armed_signal = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.seconds <= 0:
            return
        faulthandler.cancel_dump_traceback_later()
        if self._armed_signal:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old_handler)
            self._armed_signal = False


def bounded_call(fn: Callable[..., T], *args: Any, timeout: float, label: str = "", **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)`` and return its result, or raise :class:`CallTimeout`
    after ``timeout`` seconds. An exception raised by ``fn`` is re-raised unchanged.

    The call runs in a daemon thread; on timeout it is abandoned, never killed (its
    buffers must therefore stay alive: callers keep their references)."""
    result: list[Any] = []
    error: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            result.append(fn(*args, **kwargs))
        except BaseException as e:
            error.append(e)
        finally:
            done.set()

    t = threading.Thread(target=run, name=f"hicache-conformance-call-{label or fn.__name__}", daemon=True)
    start = time.monotonic()
    t.start()
    if not done.wait(timeout):
        with _abandoned_lock:
            _abandoned.add(t)
        raise CallTimeout(
            f"{label or getattr(fn, '__name__', 'call')} did not return within {timeout:g} s "
            f"(still running after {time.monotonic() - start:.1f} s)"
        )
    if error:
        raise error[0]
    return result[0]  # type: ignore[no-any-return]


def settle(timeout: float) -> list[str]:
    """Wait up to ``timeout`` seconds in all for the calls :func:`bounded_call` abandoned
    to end; the thread names of those still running (empty: none is)."""
    end = time.monotonic() + max(timeout, 0.0)
    with _abandoned_lock:
        threads = list(_abandoned)
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    with _abandoned_lock:
        _abandoned.difference_update([t for t in threads if not t.is_alive()])
        return sorted(t.name for t in _abandoned)


# atexit callbacks run before the interpreter starts finalizing, while daemon threads still
# run normally: an abandoned call that ends now never meets a finalizing interpreter.
atexit.register(settle, EXIT_SETTLE_S)
