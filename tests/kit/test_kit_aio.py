"""``EventLoopThread``: an asyncio client under the synchronous transport contract. Every
call is bounded by its timeout or its cancel token, many threads share one loop, and
``close()`` with calls in flight returns within 2 s and leaves no thread behind."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from hicache_sdk import Cancelled, TransportError
from hicache_sdk.kit import CancelToken, EventLoopThread


def _threads() -> set[threading.Thread]:
    return set(threading.enumerate())


async def _answer(value: Any, delay: float = 0.0) -> Any:
    await asyncio.sleep(delay)
    return value


async def _forever(started: threading.Event | None = None, cancelled: list[bool] | None = None) -> None:
    if started is not None:
        started.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        if cancelled is not None:
            cancelled.append(True)
        raise


def test_results_and_errors_come_back_and_threads_share_one_loop() -> None:
    loop = EventLoopThread(timeout_s=5.0, name="t-share")
    try:
        assert loop.run(_answer(41)) == 41

        async def where() -> int | None:
            return threading.get_ident()

        # 32 calls from 8 threads, each sleeping 0.2 s on the loop: they overlap there
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda i: loop.run(_answer(i, 0.2)), range(32)))
        took = time.monotonic() - t0
        assert got == list(range(32))
        assert took < 2.0, took  # 4 rounds of 0.2 s, not 32 in a row (6.4 s)
        assert loop.run(where()) == loop.thread.ident != threading.get_ident()

        async def boom() -> None:
            raise ConnectionResetError("peer went away")

        with pytest.raises(ConnectionResetError, match="peer went away"):
            loop.run(boom())
    finally:
        assert loop.close() is True


def test_a_call_is_bounded_by_its_timeout_and_cancelled_on_the_loop() -> None:
    loop = EventLoopThread(timeout_s=0.3, name="t-timeout")
    cancelled: list[bool] = []
    try:
        t0 = time.monotonic()
        with pytest.raises(TransportError) as ei:
            loop.run(_forever(cancelled=cancelled))
        took = time.monotonic() - t0
        assert ei.value.reason == "timeout" and "0.3 s" in str(ei.value)
        assert 0.25 <= took < 1.0, took
        with pytest.raises(TransportError) as ei:
            loop.run(_forever(), timeout_s=0.05)  # a per-call bound overrides the default
        assert ei.value.reason == "timeout"
        deadline = time.monotonic() + 2
        while not cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cancelled == [True]  # the coroutine itself was cancelled, not left running
        assert loop.run(_answer("still works")) == "still works"
    finally:
        loop.close()


def test_a_cancel_token_ends_the_call_at_once() -> None:
    """The resilience layer cancels a cancellable transport's token at the call's deadline:
    the waiting thread returns then, long before the loop's own timeout."""
    loop = EventLoopThread(timeout_s=30.0, name="t-cancel")
    try:
        token = CancelToken()
        started = threading.Event()
        timer = threading.Timer(0.2, lambda: (started.wait(5), token.cancel()))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(Cancelled):
            loop.run(_forever(started), cancel=token)
        took = time.monotonic() - t0
        timer.join()
        assert 0.15 <= took < 2.0, took

        ran: list[bool] = []

        async def mark() -> None:
            ran.append(True)

        with pytest.raises(Cancelled):  # already cancelled: nothing is scheduled
            loop.run(mark(), cancel=token)
        assert loop.run(_answer(1), cancel=CancelToken()) == 1
        assert ran == []
    finally:
        loop.close()


def test_close_with_calls_in_flight_returns_within_2_s_and_leaves_no_thread() -> None:
    before = _threads()
    loop = EventLoopThread(timeout_s=60.0, name="t-close")
    # the loop's default executor gets a thread too (getaddrinfo runs there)
    assert loop.run(_answer_after_getaddrinfo()) is True
    cleaned: list[bool] = []

    async def aclose() -> None:
        await asyncio.sleep(0.05)
        cleaned.append(True)

    outcomes: list[BaseException | None] = [None] * 6
    started = [threading.Event() for _ in outcomes]

    def caller(i: int) -> None:
        try:
            loop.run(_forever(started[i]))
        except BaseException as e:  # recorded for the assertion
            outcomes[i] = e

    callers = [threading.Thread(target=caller, args=(i,)) for i in range(len(outcomes))]
    for t in callers:
        t.start()
    for ev in started:
        assert ev.wait(5)
    assert len(_threads() - before) >= 2 + len(callers)  # the loop and its executor, the callers

    t0 = time.monotonic()
    assert loop.close(cleanup=aclose) is True
    took = time.monotonic() - t0
    for t in callers:
        t.join(2)
    assert took < 2.0, took
    assert all(isinstance(e, TransportError) and e.reason == "closed" for e in outcomes), outcomes
    assert cleaned == [True]
    assert not loop.thread.is_alive()
    assert {t.name for t in _threads() - before} == set()  # nothing left: no loop, no executor

    # closed: refused at once, the coroutine closed unawaited; close() again is a no-op
    coro = _answer(1)
    with pytest.raises(TransportError) as ei:
        loop.run(coro)
    assert ei.value.reason == "closed" and coro.cr_frame is None
    assert loop.close() is True


async def _answer_after_getaddrinfo() -> bool:
    await asyncio.get_running_loop().getaddrinfo("127.0.0.1", 6379)
    return True


def test_close_is_bounded_even_when_the_cleanup_hangs() -> None:
    before = _threads()
    loop = EventLoopThread(timeout_s=60.0, name="t-hang", close_timeout_s=0.5)

    async def never() -> None:
        await asyncio.Event().wait()

    t0 = time.monotonic()
    assert loop.close(cleanup=never) is True
    assert time.monotonic() - t0 < 1.0
    assert _threads() - before == set()


def test_calls_from_the_loop_thread_and_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        EventLoopThread(timeout_s=0)
    with pytest.raises(ValueError, match="close_timeout_s"):
        EventLoopThread(timeout_s=1.0, close_timeout_s=-1)
    loop = EventLoopThread(timeout_s=5.0, name="t-self")
    try:

        async def nested() -> str:
            inner = _answer(1)
            try:
                loop.run(inner)
            except RuntimeError as e:
                return str(e)
            return "no error"

        assert "own loop thread" in loop.run(nested())
        assert "t-self-loop" in repr(loop) and "running" in repr(loop)
    finally:
        loop.close()
    assert "closed" in repr(loop)
