"""Submit-then-poll tasks on event fds (no LMCache needed)."""

from __future__ import annotations

import os
import select
import threading
import time

import pytest

from hicache_sdk.lmcache.tasks import Completions, TaskRunner
from hicache_sdk.metrics.backend import Metrics


def _ready(fd: int, timeout_s: float = 5.0) -> bool:
    return bool(select.select([fd], [], [], timeout_s)[0])


def test_results_are_taken_once_and_the_fd_fires() -> None:
    done: Completions[int] = Completions()
    runner = TaskRunner(2, 10.0, Metrics(), "t")
    try:
        tid = runner.submit(done, lambda: 41 + 1, lambda: -1)
        assert _ready(done.fileno())
        assert os.eventfd_read(done.fileno()) == 1
        assert done.take(tid) == 42
        assert done.take(tid) is None
        assert done.take_all() == {}
    finally:
        runner.close()
        done.close()
    assert done.fileno() == -1


def test_a_task_past_its_deadline_completes_without_running() -> None:
    done: Completions[str] = Completions()
    metrics = Metrics()
    runner = TaskRunner(1, 0.2, metrics, "t")
    gate = threading.Event()
    ran: list[str] = []
    try:
        first = runner.submit(done, lambda: gate.wait(5) and "first", lambda: "fallback")
        second = runner.submit(done, lambda: ran.append("x") or "second", lambda: "fallback")
        time.sleep(0.4)
        gate.set()
        deadline = time.monotonic() + 5
        got: dict[int, str] = {}
        while len(got) < 2 and time.monotonic() < deadline:
            got.update(done.take_all())
            time.sleep(0.01)
        assert got == {first: "first", second: "fallback"}
        assert ran == []
        assert metrics.snapshot()["counters"]["task_expired"] == 1
    finally:
        runner.close()
        done.close()


def test_a_raising_task_completes_with_its_fallback_and_after_close_at_once() -> None:
    done: Completions[int] = Completions()
    runner = TaskRunner(1, 10.0, Metrics(), "t")
    tid = runner.submit(done, lambda: 1 // 0, lambda: -1)
    assert _ready(done.fileno())
    assert done.take(tid) == -1
    runner.close()
    late = runner.submit(done, lambda: 7, lambda: -2)
    assert done.take(late) == -2
    done.close()
    done.put(99, 1)  # dropped, the fd is never written after close
    assert done.take(99) is None


def test_bad_workers() -> None:
    with pytest.raises(ValueError, match="workers"):
        TaskRunner(0, 1.0, Metrics(), "t")
