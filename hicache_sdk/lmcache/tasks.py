"""Submit-then-poll tasks completed on event fds (no LMCache import).

LMCache's multiprocess L2 adapter hands work over with ``submit_*`` and collects results
by polling, woken by one event fd per kind of task. :class:`Completions` is one such
kind: finished results by task id and the event fd written once per finished task.
:class:`TaskRunner` runs the work on a few threads and guarantees that every submitted
task completes:

* a task still queued when its deadline (``timeout_s`` after submission) has passed is
  completed with its fallback result without any I/O (counted ``task_expired``); the I/O
  of a started task is bounded by the transport's own deadlines (the resilience layer);
* work that raises completes with its fallback (the exception is logged and counted as
  ``bug:<ExceptionType>``);
* a task submitted after :meth:`TaskRunner.close` completes at once with its fallback.

A result is taken once: :meth:`Completions.take` returns it and forgets it. After
:meth:`Completions.close` the fd is closed (never written again) and results are dropped.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from ..metrics.backend import Metrics

__all__ = ["Completions", "TaskRunner"]

log = logging.getLogger(__name__)
R = TypeVar("R")


class Completions(Generic[R]):
    """Finished results of one kind of task, signalled on their own event fd."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[int, R] = {}
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._closed = False

    def fileno(self) -> int:
        """The event fd (readable while results wait); ``-1`` after :meth:`close`."""
        return -1 if self._closed else self._fd

    def put(self, task_id: int, result: R) -> None:
        """Record ``result`` and signal the fd (dropped after :meth:`close`)."""
        with self._lock:
            if self._closed:
                return
            self._done[task_id] = result
            os.eventfd_write(self._fd, 1)

    def take(self, task_id: int) -> R | None:
        """The result of ``task_id`` once it finished, then never again (``None``)."""
        with self._lock:
            return self._done.pop(task_id, None)

    def take_all(self) -> dict[int, R]:
        """Every finished result, each returned once."""
        with self._lock:
            done, self._done = self._done, {}
            return done

    def close(self) -> None:
        """Close the fd and drop pending results. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._done.clear()
            os.close(self._fd)


class TaskRunner:
    """Run tasks on ``workers`` threads; each completes into its :class:`Completions`."""

    def __init__(self, workers: int, timeout_s: float, metrics: Metrics, name: str) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        self.timeout_s = float(timeout_s)
        self._metrics = metrics
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self._idle = threading.Condition()
        self._running = 0

    def next_id(self) -> int:
        """A fresh task id (unique across every kind this runner serves)."""
        return next(self._ids)

    def submit(
        self,
        sink: Completions[R],
        work: Callable[[], R],
        fallback: Callable[[], R],
        task_id: int | None = None,
    ) -> int:
        """Run ``work`` and put its result (or ``fallback()``) into ``sink``; returns the id."""
        tid = self.next_id() if task_id is None else task_id
        deadline = time.monotonic() + self.timeout_s

        def run() -> None:
            try:
                if self._closed or time.monotonic() > deadline:
                    self._metrics.count("task_expired")
                    sink.put(tid, fallback())
                    return
                try:
                    result = work()
                except Exception as e:
                    log.exception("hicache-sdk LMCache task failed")
                    self._metrics.error(f"bug:{type(e).__name__}")
                    result = fallback()
                sink.put(tid, result)
            finally:
                with self._idle:
                    self._running -= 1
                    self._idle.notify_all()

        with self._lock:
            if not self._closed:
                with self._idle:
                    self._running += 1
                self._pool.submit(run)
                return tid
        sink.put(tid, fallback())
        return tid

    def close(self, wait_s: float = 5.0) -> None:
        """Stop taking tasks, complete the queued ones with their fallback (their
        deadline is moot), and wait up to ``wait_s`` for running ones. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=False)
        with self._idle:
            self._idle.wait_for(lambda: self._running == 0, timeout=wait_s)
