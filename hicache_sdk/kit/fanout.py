"""Bounded fan-out of a batch over a few threads, the calling thread being one of them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["FanOut"]

T = TypeVar("T")
R = TypeVar("R")


class FanOut:
    """Run ``fn`` over items on at most ``workers`` threads at once (the caller counts as
    one: ``workers - 1`` pool threads, started lazily).

    :meth:`map` returns results in item order. Items are split into contiguous parts (one per
    thread), so a batch costs one hand-off per thread, not one per item. If calls raise, the
    first exception (in item order) is re-raised after every started part has ended; nothing
    keeps running behind the caller's back. After :meth:`close` (idempotent) :meth:`map` runs
    everything in the calling thread.
    """

    def __init__(self, workers: int, name: str = "hicache-fanout") -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        self.workers = workers
        self._name = name
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def _executor(self) -> ThreadPoolExecutor | None:
        if self.workers < 2:
            return None
        with self._lock:
            if self._closed:
                return None
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers - 1, thread_name_prefix=self._name)
            return self._pool

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, min_per_thread: int = 1) -> list[R]:
        """``[fn(x) for x in items]``, spread over the threads (each takes at least
        ``min_per_thread`` items)."""
        n = len(items)
        parts = min(self.workers, n // max(min_per_thread, 1)) if n else 0
        pool = self._executor() if parts >= 2 else None
        if pool is None:
            return [fn(x) for x in items]
        bounds = [(n * p // parts, n * (p + 1) // parts) for p in range(parts)]

        def run(lo: int, hi: int) -> list[R]:
            return [fn(items[i]) for i in range(lo, hi)]

        futures: list[Future[list[R]]] = []
        try:
            for lo, hi in bounds[1:]:
                futures.append(pool.submit(run, lo, hi))
        except RuntimeError:  # closed concurrently: do the rest here
            done = len(futures) + 1
            futures.extend(_done(run(lo, hi)) for lo, hi in bounds[done:])
        first: BaseException | None = None
        try:
            out = run(*bounds[0])
        except BaseException as e:
            first, out = e, []
        for f in futures:  # wait for every part, even after a failure
            try:
                part = f.result()
            except BaseException as e:
                first = first or e
                continue
            out.extend(part)
        if first is not None:
            raise first
        return out

    def close(self) -> None:
        """Stop the pool threads (waiting for running parts). Idempotent."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


def _done(value: R) -> Future[R]:
    f: Future[R] = Future()
    f.set_result(value)
    return f
