"""The deadline runner: a race of finishing against abandoning, hand-offs, hook errors,
shutdown, the exit drain."""

from __future__ import annotations

import functools
import gc
import logging
import random
import threading
import time
import weakref
from typing import Any

import pytest

from hicache_sdk.resilience.deadline import Baton, DeadlineRunner, post_wait


def test_race_of_finishing_and_abandoning(runner_cls: type[DeadlineRunner]) -> None:
    """Calls whose duration straddles their deadline, from four threads: each ends exactly
    one way -- in time with its own result, or abandoned with its on_late run once."""
    r = runner_cls(3)
    late: list[int] = []
    lock = threading.Lock()
    outcomes: list[tuple[int, bool, object]] = []
    errors: list[BaseException] = []

    def client(k: int) -> None:
        rng = random.Random(k)
        try:
            for i in range(150):
                key = k * 1000 + i
                spin = rng.random() * 2e-4

                def fn(key: int = key, spin: float = spin) -> int:
                    end = time.perf_counter() + spin
                    while time.perf_counter() < end:
                        pass
                    return key

                def on_late(call: Any, key: int = key) -> None:
                    with lock:
                        late.append(key)

                ok, call = r.run(fn, rng.random() * 2e-4, on_late)
                with lock:
                    outcomes.append((key, ok, call.result if ok else None))
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert errors == []
    assert r.drain(10) and r.pending == 0 and r.abandoned == 0
    assert len(outcomes) == 600
    in_time = [(key, res) for key, ok, res in outcomes if ok]
    assert all(key == res for key, res in in_time)
    abandoned = sorted(key for key, ok, _ in outcomes if not ok)
    assert sorted(late) == abandoned  # on_late exactly once per abandoned call, never for the others
    r.shutdown()


def test_hook_errors_are_logged_and_the_worker_lives_on(caplog: pytest.LogCaptureFixture) -> None:
    def bad_change(n: int) -> None:
        raise RuntimeError(f"gauge {n}")

    r = DeadlineRunner(1, on_abandon_change=bad_change)
    gate = threading.Event()

    def bad_late(call: Any) -> None:
        raise RuntimeError("late hook")

    with caplog.at_level(logging.ERROR, logger="hicache_sdk.resilience.deadline"):
        ok, call = r.run(gate.wait, 0.01, on_late=bad_late)
        assert not ok
        gate.set()
        assert call.wait_done(5) and r.drain(5)
    msgs = [rec.getMessage() for rec in caplog.records]
    assert "deadline runner: on_late hook failed" in msgs
    assert "deadline runner: on_abandon_change hook failed" in msgs
    late = [rec for rec in caplog.records if rec.getMessage() == "deadline runner: on_late hook failed"]
    assert late[0].exc_info is not None and "late hook" in str(late[0].exc_info[1])
    ok, call = r.run(lambda: "alive", 5.0)  # the same worker serves on
    assert ok and call.result == "alive" and r._started == 1
    r.shutdown()


class _Owner:
    """Holds a runner whose hook is its own bound method: a reference cycle."""

    def __init__(self) -> None:
        self.runner = DeadlineRunner(1, name="collect-me", on_abandon_change=self.changed)

    def changed(self, n: int) -> None:
        pass


def test_shutdown_finishes_the_backlog_and_the_runner_is_collected() -> None:
    owner = _Owner()
    r = owner.runner
    gate = threading.Event()
    ran: list[int] = []
    calls = [r.submit(gate.wait)] + [r.submit(lambda i=i: ran.append(i)) for i in range(3)]  # type: ignore[misc]
    assert not r.drain(0.05)  # the first call blocks the one worker
    r.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        r.submit(lambda: None)
    gate.set()
    assert all(c.wait_done(5) for c in calls) and ran == [0, 1, 2]  # the backlog ran first
    ref = weakref.ref(r)
    del r, calls, owner
    end = time.monotonic() + 5
    while ref() is not None and time.monotonic() < end:  # the worker thread exits, then gc
        gc.collect()
        time.sleep(0.01)
    assert ref() is None
    assert not [t for t in threading.enumerate() if t.name.startswith("collect-me-")]


def test_drain_all_waits_for_abandoned_calls_on_every_runner(runner_cls: type[DeadlineRunner]) -> None:
    from hicache_sdk.resilience.deadline import drain_all

    a, b = runner_cls(1), runner_cls(1)
    release = threading.Event()
    late = threading.Event()
    in_time, _ = a.run(lambda: time.sleep(0.2), 0.01)
    assert in_time is False and a.abandoned == 1
    in_time, _ = b.run(release.wait, 0.01, on_late=lambda c: late.set())
    assert in_time is False
    t0 = time.monotonic()
    assert drain_all(0.5) is False  # b's call is still blocked
    assert 0.45 <= time.monotonic() - t0 < 3 and a.abandoned == 0
    release.set()
    assert drain_all(2) is True and late.is_set() and b.abandoned == 0
    a.shutdown()
    b.shutdown()


_EXIT_SCRIPT = """
import time, torch

a = torch.zeros(1 << 20)

def late():  # past its deadline, then torch work that releases the GIL, for ~1 s
    time.sleep(0.3)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        a.add_(1)

{abandon}
time.sleep(0.1)  # the interpreter exits while the abandoned call is inside torch
"""
_ON_A_RUNNER = """
from hicache_sdk.resilience.deadline import DeadlineRunner
r = DeadlineRunner(1)
assert not r.run(late, 0.25)[0]
"""
_BY_THE_SUITE = """
from hicache_conformance.watchdog import CallTimeout, bounded_call
try:
    bounded_call(late, timeout=0.25, label="late")
except CallTimeout:
    pass
"""


@pytest.mark.parametrize(
    "abandon", [_ON_A_RUNNER, _BY_THE_SUITE], ids=["python-runner", "conformance-bounded_call"]
)
def test_interpreter_exit_waits_for_abandoned_calls_in_native_code(abandon: str) -> None:
    """Without the exit drain (the runners') or the exit settle (the conformance suite's),
    the abandoned call's daemon thread meets a finalizing interpreter inside torch and the
    process aborts ("terminate called without an active exception", exit status -6)."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    script = _EXIT_SCRIPT.format(abandon=abandon)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])


def test_baton_post_wait_and_timeout() -> None:
    a, b = Baton(), Baton()
    t = time.monotonic()
    assert b.wait(0.05) is False
    assert 0.04 <= time.monotonic() - t < 2.0
    assert b.wait(0) is False  # nothing pending: no wait at all
    b.post()
    assert b.wait(0.05) is True  # the pending post is taken...
    assert b.wait(0) is False  # ...once
    assert post_wait(a, b, 0.01) is False  # a posted, b never
    assert a.wait(0) is True
    b.post()
    assert post_wait(a, b, 5.0) is True and a.wait(0) is True


def test_post_wait_wakes_the_other_thread() -> None:
    ping, pong = Baton(), Baton()
    seen: list[int] = []

    def other() -> None:  # answers each ping with a pong, sleeping on the next ping
        assert ping.wait(5.0)
        for i in range(200):
            seen.append(i)
            if i < 199:
                assert post_wait(pong, ping, 5.0)
            else:
                pong.post()

    t = threading.Thread(target=other)
    t.start()
    for i in range(200):
        assert post_wait(ping, pong, 5.0)
        assert seen[-1] == i  # woken only after the other thread's round i
    t.join(5)
    assert seen == list(range(200)) and ping.wait(0) is False and pong.wait(0) is False


def test_runner_run_result_error_abandon_backlog(runner_cls: type[DeadlineRunner]) -> None:
    changes: list[int] = []
    r = runner_cls(1, on_abandon_change=changes.append)
    for i in range(50):  # back-to-back: the same worker every time
        ok, call = r.run(lambda i=i: i * 2, 5.0)  # type: ignore[misc]
        assert ok and call.result == i * 2 and call.error is None
    ok, call = r.run(lambda: 1 / 0, 5.0)
    assert ok and isinstance(call.error, ZeroDivisionError)
    assert r._started == 1
    gate = threading.Event()
    late: list[bool] = []
    ok, slow = r.run(gate.wait, 0.02, on_late=lambda c: late.append(c.started))
    assert not ok and slow.abandoned and r.abandoned == 1 and changes == [1]
    # the one worker is busy: this call waits in the backlog and is abandoned there
    skipped: list[bool] = []
    ok, queued = r.run(lambda: skipped.append(True), 0.02, on_late=lambda c: late.append(c.started))
    assert not ok and queued.abandoned
    gate.set()
    assert slow.wait_done(5) and queued.wait_done(5) and queued.wait_done(0)  # every waiter gets through
    assert r.drain(5) and r.abandoned == 0 and skipped == [] and late == [True, False]
    assert changes == [1, 2, 1, 0]
    ok, call = r.run(lambda: "after", 5.0)
    assert ok and call.result == "after"
    r.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        r.run(lambda: None, 1.0)


def test_runner_submit_and_run_mix_under_threads(runner_cls: type[DeadlineRunner]) -> None:
    r = runner_cls(3)
    errors: list[BaseException] = []

    def client(k: int, use_run: bool) -> None:
        try:
            for i in range(100):
                fn = functools.partial(int.__add__, k * 1000, i)
                if use_run:
                    ok, call = r.run(fn, 5.0)
                else:
                    call = r.submit(fn)
                    ok = r.wait(call, 5.0)
                assert ok and call.result == k * 1000 + i
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=client, args=(k, k % 2 == 0)) for k in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert errors == [] and r.drain(5) and r.pending == 0 and r._started <= 3
    r.shutdown()
