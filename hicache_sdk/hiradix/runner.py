"""Where background jobs (hit queries, chunked reads, backups) run.

:class:`ThreadRunner` runs them in order on one daemon thread (FIFO, so ranks that submit in
the same order call their collectives in the same order). :class:`StepRunner` queues them
until a test calls :meth:`StepRunner.step`: the deterministic step scheduler.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)
Job = Callable[[], None]


class Runner(Protocol):
    def submit(self, job: Job) -> None: ...

    def close(self) -> None: ...


class StepRunner:
    """Jobs wait until :meth:`step` runs the oldest one (or ``run_all`` runs every one)."""

    def __init__(self) -> None:
        self.pending: deque[Job] = deque()

    def submit(self, job: Job) -> None:
        self.pending.append(job)

    def step(self) -> bool:
        """Run the oldest job; ``False`` when none was pending."""
        if not self.pending:
            return False
        self.pending.popleft()()
        return True

    def run_all(self) -> int:
        n = 0
        while self.step():
            n += 1
        return n

    def close(self) -> None:
        self.run_all()


class ThreadRunner:
    """One worker thread, FIFO. ``close`` drains the queue and joins the thread."""

    def __init__(self, name: str = "hicache-readpath") -> None:
        self._q: queue.Queue[Job | None] = queue.Queue()
        self._t = threading.Thread(target=self._loop, name=name, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            try:
                job()
            except Exception:  # a job must never kill the worker
                log.exception("read-path background job failed")

    def submit(self, job: Job) -> None:
        self._q.put(job)

    def close(self) -> None:
        self._q.put(None)
        self._t.join()
