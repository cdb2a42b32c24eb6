"""An asyncio client under the synchronous transport contract: one event loop per transport.

A :class:`~hicache_sdk.transport.Transport` is synchronous and thread-safe: SGLang calls it
from several threads at once, and the resilience layer runs it on worker threads under
deadlines. Many client libraries are asyncio-only (``redis.asyncio``, NATS, aiobotocore, most
cloud SDKs). :class:`EventLoopThread` runs one event loop on a daemon thread of its own; a
transport keeps one, builds its async client on it, and turns each call into
``loop.run(coro, ...)``: the calling thread waits for the coroutine's result on the loop.

* **Thread-safe.** Any number of threads may call :meth:`EventLoopThread.run` at once; their
  coroutines run concurrently on the one loop (the client's connection pool is shared).
* **Bounded.** Every call waits at most its ``timeout_s`` (the loop's default when not
  given). At the end the coroutine is cancelled on the loop and the caller gets a
  :class:`~hicache_sdk.errors.TransportError` with reason ``"timeout"`` at once; it never
  waits for the cancellation to finish.
* **Cancelled at the call's deadline.** ``run(..., cancel=token)`` takes the
  :class:`~hicache_sdk.kit.cancel.CancelToken` that a ``cancellable`` transport receives in
  ``read`` / ``write``: when the resilience layer gives up on the call at its deadline, the
  token's interrupter cancels the coroutine and the caller gets
  :class:`~hicache_sdk.errors.Cancelled` at once, so no worker thread stays behind waiting.
  The coroutines never see caller memory (they take and return ``bytes``); the transport
  copies between ``bytes`` and the caller's segments in its own thread, under
  ``cancel.guard()``. That is what lets an asyncio transport declare ``cancellable``.
* **Clean shutdown.** :meth:`EventLoopThread.close` refuses new calls, makes every call in
  flight return at once (``TransportError``, reason ``"closed"``), cancels the loop's tasks,
  awaits the client's own cleanup (``cleanup``, e.g. ``client.aclose``), shuts down async
  generators and the loop's default executor (which ``getaddrinfo`` starts), stops the loop
  and joins its thread: all within ``close_timeout_s`` (default 1.5 s). It returns whether
  the thread ended; a coroutine that blocks the loop thread itself (a synchronous call
  inside ``async def``) can keep it alive, which is logged.

Edge cases: a coroutine handed to a closed loop is closed unawaited (no "never awaited"
warning) and the call raises ``TransportError`` (reason ``"closed"``); a token already
cancelled raises ``Cancelled`` before anything is scheduled; calling :meth:`run` or
:meth:`close` from the loop's own thread is a ``RuntimeError`` (it would wait for itself);
an exception raised by the coroutine propagates unchanged (declare the client library's
exceptions in the transport's ``io_errors``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from ..errors import Cancelled, TransportError
from .cancel import CancelToken

__all__ = ["EventLoopThread"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The default of ``close_timeout_s``: how long :meth:`EventLoopThread.close` may take.
CLOSE_TIMEOUT_S = 1.5


class EventLoopThread:
    """One asyncio event loop running on a daemon thread of its own (module docs).

    ``timeout_s``: the default bound of one :meth:`run` call (seconds, > 0);
    ``close_timeout_s``: the most :meth:`close` takes; ``name``: the thread's name
    (``"<name>-loop"``). The thread starts here and its loop is running when the
    constructor returns.
    """

    def __init__(
        self, *, timeout_s: float, name: str = "hicache-aio", close_timeout_s: float = CLOSE_TIMEOUT_S
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        if not close_timeout_s > 0:
            raise ValueError(f"close_timeout_s must be > 0, got {close_timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.close_timeout_s = float(close_timeout_s)
        self._lock = threading.Lock()
        self._closed = False
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(started,), name=f"{name}-loop", daemon=True)
        self._thread.start()
        if not started.wait(10.0):  # pragma: no cover - a thread that never ran
            raise RuntimeError(f"{self._thread.name}: the event loop did not start")

    # -- the loop thread -------------------------------------------------------------------
    def _main(self, started: threading.Event) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        try:
            loop.run_forever()
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    @property
    def thread(self) -> threading.Thread:
        """The loop's thread (alive from construction until :meth:`close` ends it)."""
        return self._thread

    @property
    def closed(self) -> bool:
        return self._closed

    # -- calls -----------------------------------------------------------------------------
    def run(
        self,
        aw: Awaitable[T],
        *,
        timeout_s: float | None = None,
        cancel: CancelToken | None = None,
    ) -> T:
        """Run ``aw`` (a coroutine, or any awaitable a client method returns) on the loop
        and return its result, waiting at most ``timeout_s`` (default: the loop's). Raises
        ``TransportError`` (reason ``"timeout"``) when the time is up and
        ``TransportError`` (``"closed"``) when the loop is or gets closed, ``Cancelled``
        when ``cancel`` is cancelled before or during the call; in each case the coroutine
        is cancelled (or never started). Whatever ``aw`` raises propagates."""
        coro = aw if isinstance(aw, Coroutine) else _awaited(aw)
        limit = self.timeout_s if timeout_s is None else timeout_s
        if self._on_loop_thread():
            coro.close()
            raise RuntimeError("EventLoopThread.run() called from its own loop thread: await instead")
        if cancel is not None and cancel.cancelled:
            coro.close()
            raise Cancelled()
        with self._lock:
            if self._closed:
                coro.close()
                raise TransportError("the event loop is closed", reason="closed")
            fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
            self._inflight.add(fut)
        remove = None
        if cancel is not None:

            def interrupt() -> None:  # never blocks: schedules the task's cancellation
                fut.cancel()

            remove = cancel.on_cancel(interrupt)
        try:
            done, _ = concurrent.futures.wait([fut], timeout=max(limit, 0.0))
            if not done and fut.cancel():
                raise TransportError(f"no answer within {limit:g} s", reason="timeout")
            if fut.cancelled():
                if self._closed:
                    raise TransportError("the event loop was closed during the call", reason="closed")
                if cancel is not None and cancel.cancelled:
                    raise Cancelled()
                raise TransportError("the call was cancelled", reason="cancelled")
            return fut.result()
        finally:
            if remove is not None:
                remove()
            with self._lock:
                self._inflight.discard(fut)

    def _on_loop_thread(self) -> bool:
        return threading.get_ident() == self._thread.ident

    # -- shutdown --------------------------------------------------------------------------
    def close(self, cleanup: Callable[[], Awaitable[object]] | None = None) -> bool:
        """Shut down within ``close_timeout_s`` (module docs); ``cleanup()`` is awaited on
        the loop once the calls in flight are cancelled (the client's ``aclose``; its
        errors are logged at DEBUG). Returns whether the loop's thread has ended.
        Idempotent: a second call only reports that."""
        if self._on_loop_thread():
            raise RuntimeError("EventLoopThread.close() called from its own loop thread")
        with self._lock:
            if self._closed:
                return not self._thread.is_alive()
            self._closed = True
            inflight = list(self._inflight)
        for fut in inflight:  # their callers return now, with reason "closed"
            fut.cancel()
        end = time.monotonic() + self.close_timeout_s
        try:
            down = asyncio.run_coroutine_threadsafe(self._shutdown(cleanup, end), self._loop)
            concurrent.futures.wait([down], timeout=max(end - time.monotonic(), 0.0))
            down.cancel()
            self._loop.call_soon_threadsafe(self._loop.stop)
        except RuntimeError:  # the loop is already closed
            pass
        self._thread.join(max(end - time.monotonic(), 0.0))
        if self._thread.is_alive():
            log.warning(
                "%s: the event loop did not stop within %g s (a coroutine blocking the loop "
                "thread?); its daemon thread is left running",
                self._thread.name,
                self.close_timeout_s,
            )
            return False
        return True

    async def _shutdown(self, cleanup: Callable[[], Awaitable[object]] | None, end: float) -> None:
        """On the loop: cancel every other task, await ``cleanup``, close async generators
        and the default executor, each within its share of the time left before ``end``."""

        def share(part: float) -> float:
            return max((end - time.monotonic()) * part, 0.0)

        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=share(0.3))
        steps: list[tuple[str, Callable[[], Awaitable[object]], float]] = []
        if cleanup is not None:
            steps.append(("cleanup", cleanup, 0.5))
        steps += [
            ("async generators", self._loop.shutdown_asyncgens, 0.3),
            ("default executor", self._loop.shutdown_default_executor, 0.8),
        ]
        for what, step, part in steps:
            try:
                await asyncio.wait_for(step(), timeout=share(part))
            except (Exception, asyncio.CancelledError) as e:
                log.debug("%s: %s at close: %s: %s", self._thread.name, what, type(e).__name__, e)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running"
        return f"EventLoopThread({self._thread.name!r}, {state}, timeout_s={self.timeout_s:g})"


async def _awaited(aw: Awaitable[T]) -> T:
    return await aw
