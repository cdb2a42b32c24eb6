"""The deadline runner's hand-off: ``_native.Baton`` / ``post_wait`` (the GIL given up before
the other thread is woken) and the pure-Python lock fallback, which must behave the same."""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import hicache_sdk.resilience.deadline as deadline
from hicache_sdk.resilience.deadline import (
    DeadlineRunner,
    PyDeadlineRunner,
    _lock_post_wait,
    _LockBaton,
    native_runner,
)

try:
    from hicache_sdk._native import Baton as NativeBaton
    from hicache_sdk._native import post_wait as native_post_wait
except ImportError:  # pragma: no cover - not built, or not Linux
    NativeBaton = None  # type: ignore[assignment,misc]
    native_post_wait = None  # type: ignore[assignment]

IMPLS = [pytest.param((_LockBaton, _lock_post_wait), id="lock")]
if NativeBaton is not None:
    IMPLS.insert(0, pytest.param((NativeBaton, native_post_wait), id="native"))


@pytest.fixture(params=IMPLS)
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """Each hand-off implementation, installed in the Python runner's module."""
    baton, post_wait = request.param
    monkeypatch.setattr(deadline, "Baton", baton)
    monkeypatch.setattr(deadline, "post_wait", post_wait)
    yield baton, post_wait


RUNNER_IMPLS = [pytest.param((PyDeadlineRunner, p.values[0]), id=f"py-{p.id}") for p in IMPLS]
if native_runner():
    RUNNER_IMPLS.insert(0, pytest.param((DeadlineRunner, None), id="native-runner"))


@pytest.fixture(params=RUNNER_IMPLS)
def any_runner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> type[PyDeadlineRunner]:
    """Every runner: the native core, and the Python one with each hand-off installed."""
    cls, batons = request.param
    if batons is not None:
        monkeypatch.setattr(deadline, "Baton", batons[0])
        monkeypatch.setattr(deadline, "post_wait", batons[1])
    runner: type[PyDeadlineRunner] = cls
    return runner


def test_baton_post_wait_and_timeout(impl: tuple[Any, Any]) -> None:
    baton, post_wait = impl
    a, b = baton(), baton()
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


def test_post_wait_wakes_the_other_thread(impl: tuple[Any, Any]) -> None:
    baton, post_wait = impl
    ping, pong = baton(), baton()
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


@pytest.mark.skipif(NativeBaton is None, reason="the native module did not build (or not Linux)")
def test_native_baton_rejects_bad_arguments() -> None:
    a = NativeBaton()
    with pytest.raises(TypeError, match="argument 2 must be a Baton, got int"):
        native_post_wait(a, 1, 0.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="argument 1 must be a Baton, got _LockBaton"):
        native_post_wait(_LockBaton(), a, 0.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timeout must be a number of seconds, got str"):
        a.wait("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nan"):
        a.wait(float("nan"))
    with pytest.raises(TypeError, match="takes 3 arguments"):
        native_post_wait(a, a)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="0 arguments"):
        NativeBaton(1)  # type: ignore[call-arg]
    assert a.wait(0) is False  # a rejected post_wait posted nothing


class _Interrupted(Exception):
    pass


@pytest.mark.skipif(NativeBaton is None, reason="the native module did not build (or not Linux)")
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals: main thread")
def test_native_wait_runs_signal_handlers_and_keeps_its_deadline() -> None:
    a, b = NativeBaton(), NativeBaton()
    calls: list[float] = []

    def quiet(signum: int, frame: object) -> None:
        calls.append(time.monotonic())

    def loud(signum: int, frame: object) -> None:
        raise _Interrupted()

    old = signal.signal(signal.SIGALRM, quiet)
    try:
        # a handler that returns: the wait goes on until the same deadline (not restarted)
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        t = time.monotonic()
        assert native_post_wait(a, b, 0.3) is False
        took = time.monotonic() - t
        assert len(calls) == 1 and 0.25 <= took < 0.6, (calls, took)
        assert a.wait(0) is True and a.wait(0) is False  # posted exactly once
        # a handler that raises: the exception comes out of the wait at once
        signal.signal(signal.SIGALRM, loud)
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        t = time.monotonic()
        with pytest.raises(_Interrupted):
            b.wait(5.0)
        assert time.monotonic() - t < 2.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object, object]]:
    real = deadline.post_wait
    log: list[tuple[str, object, object]] = []

    def spy(post: object, wait: object, timeout: float) -> bool:
        log.append((threading.current_thread().name, post, wait))
        return real(post, wait, timeout)  # type: ignore[arg-type]

    monkeypatch.setattr(deadline, "post_wait", spy)
    return log


def test_runner_hands_off_with_post_wait_both_ways(
    impl: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    r = PyDeadlineRunner(1, name="handoff")
    ok, first = r.run(lambda: 1, 5.0)  # spawns the worker (no idle one to hand to yet)
    assert ok and first.result == 1 and r.drain(5)
    worker = r._idle[-1]
    log = _spy(monkeypatch)
    ok, call = r.run(lambda: 2, 5.0)
    assert ok and call.result == 2
    # the caller wakes the idle worker and sleeps on the call in one hand-off; the worker
    # hands the result back and sleeps on its wake in one hand-off
    assert log == [
        (threading.current_thread().name, worker.wake, call._done),
        ("handoff-0", call._done, worker.wake),
    ]
    r.shutdown()


def test_runner_run_result_error_abandon_backlog(any_runner: type[PyDeadlineRunner]) -> None:
    changes: list[int] = []
    r = any_runner(1, on_abandon_change=changes.append)
    for i in range(50):  # back-to-back: the same worker, woken by post_wait every time
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


def test_runner_submit_and_run_mix_under_threads(any_runner: type[PyDeadlineRunner]) -> None:
    r = any_runner(3)
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
