"""The deadline runner's native core (``_native.Runner``): what only it has (placement via
its own counters, hook errors, argument checks, signals), and a race of finishing against
abandoning that both implementations must pass."""

from __future__ import annotations

import gc
import logging
import os
import random
import signal
import threading
import time
import weakref
from typing import Any

import pytest

from hicache_sdk.resilience.deadline import DeadlineRunner, PyDeadlineRunner, can_follow_cpu, native_runner

needs_native = pytest.mark.skipif(
    not native_runner(), reason="the native module did not build (or not Linux)"
)


def test_race_of_finishing_and_abandoning(runner_cls: type[PyDeadlineRunner]) -> None:
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


@needs_native
@pytest.mark.skipif(
    not can_follow_cpu() or len(os.sched_getaffinity(0)) < 2, reason="needs following and two CPUs"
)
def test_native_places_the_worker_then_runs_the_call_unpinned() -> None:
    full = os.sched_getaffinity(0)
    a, b = sorted(full)[:2]
    seen: dict[str, Any] = {}

    def job() -> set[int]:
        return os.sched_getaffinity(0)

    def caller() -> None:  # a thread of its own: pinning it leaves the test's thread alone
        me = threading.get_native_id()
        r = DeadlineRunner(1)
        off = DeadlineRunner(1, follow_caller_cpu=False)
        try:
            seen["follows"] = (r.follows_caller_cpu, off.follows_caller_cpu)
            assert r.run(job, 5.0)[0] and r._pins == 0  # spawned with the full mask: no placement
            masks = []
            for cpu in (a, b, a):
                os.sched_setaffinity(me, {cpu})
                ok, call = r.run(job, 5.0)
                assert ok
                masks.append(call.result)
            r._force_cpu(b)  # placed on another CPU than the caller's: still unpinned to run
            ok, call = r.run(job, 5.0)
            masks.append(call.result)
            seen["follow"] = (r._pins, masks)
            for _ in range(2):
                ok, call = off.run(job, 5.0)
                assert ok
            seen["off"] = (off._pins, call.result)
        finally:
            r.shutdown()
            off.shutdown()

    t = threading.Thread(target=caller)
    t.start()
    t.join(10)
    assert seen["follows"] == (True, False)
    assert seen["follow"] == (4, [full] * 4)  # one placement per call to an idle worker
    assert seen["off"] == (0, {a})  # not following: the worker keeps the mask it inherited


@needs_native
@pytest.mark.skipif(not can_follow_cpu(), reason="needs following")
def test_native_stops_following_when_affinity_is_refused() -> None:
    r = DeadlineRunner(1)
    assert r.run(lambda: 1, 5.0)[0]  # the worker exists and is idle
    r._force_cpu(1023)  # not in the cpuset: sched_setaffinity refuses it
    for i in range(3):  # every call still runs; the first refusal turns following off
        ok, call = r.run(lambda i=i: i, 5.0)  # type: ignore[misc]
        assert ok and call.result == i
    assert not r.follows_caller_cpu and r._pins == 0
    r.shutdown()


class _Interrupted(Exception):
    pass


@needs_native
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals: main thread")
def test_native_wait_signals_keep_the_deadline_and_a_raising_handler_abandons() -> None:
    r = DeadlineRunner(1)
    gate = threading.Event()
    late: list[bool] = []
    ticks: list[float] = []

    def quiet(signum: int, frame: object) -> None:
        ticks.append(time.monotonic())

    def loud(signum: int, frame: object) -> None:
        raise _Interrupted()

    old = signal.signal(signal.SIGALRM, quiet)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        t = time.monotonic()
        ok, call = r.run(lambda: gate.wait(5), 0.3, on_late=lambda c: late.append(c.started))
        took = time.monotonic() - t
        assert not ok and len(ticks) == 1 and 0.25 <= took < 0.6, (ticks, took)  # not restarted
        gate.set()
        assert call.wait_done(5) and r.drain(5) and late == [True]
        gate.clear()
        signal.signal(signal.SIGALRM, loud)
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        t = time.monotonic()
        with pytest.raises(_Interrupted):
            r.run(lambda: gate.wait(5), 5.0, on_late=lambda c: late.append(c.started))
        assert time.monotonic() - t < 2.0
        assert r.abandoned == 1  # abandoned, so that its on_late still runs when it ends
        gate.set()
        assert r.drain(5) and r.abandoned == 0 and late == [True, True]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        r.shutdown()


@needs_native
def test_native_hook_errors_are_logged_and_the_worker_lives_on(caplog: pytest.LogCaptureFixture) -> None:
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


@needs_native
def test_native_argument_checks() -> None:
    r = DeadlineRunner(1)
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        r.run(1, 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="missing argument timeout"):
        r.run(lambda: 1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="timeout must be a number of seconds, got str"):
        r.run(lambda: 1, "1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nan"):
        r.run(lambda: 1, float("nan"))
    with pytest.raises(TypeError, match="unexpected keyword argument 'later'"):
        r.submit(lambda: 1, later=None)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="must be a Call of this runner"):
        r.wait(object(), 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the runner starts its own workers"):
        r._serve(1)  # type: ignore[attr-defined]
    assert r.pending == 0 and r._started == 0  # nothing was submitted
    ok, call = r.run(fn=lambda: 3, timeout=5.0, on_late=None)  # keywords
    assert ok and call.result == 3 and call.error is None and call.on_late is None
    c = r.submit(lambda: 4)
    assert r.wait(c, -1.0) in (True, False)  # a negative timeout does not wait
    assert c.wait_done() and c.wait_done(0) and c.result == 4  # every waiter gets through
    r.shutdown()
    with pytest.raises(ValueError, match="max_workers must be >= 1"):
        DeadlineRunner(0)


class _Owner:
    """Holds a runner whose hook is its own bound method: a reference cycle."""

    def __init__(self) -> None:
        self.runner = DeadlineRunner(1, name="collect-me", on_abandon_change=self.changed)

    def changed(self, n: int) -> None:
        pass


@needs_native
def test_native_shutdown_finishes_the_backlog_and_the_runner_is_collected() -> None:
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


def test_drain_all_waits_for_abandoned_calls_on_every_runner(runner_cls: type[PyDeadlineRunner]) -> None:
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
    ("native", "abandon"),
    [("1", _ON_A_RUNNER), ("0", _ON_A_RUNNER), ("1", _BY_THE_SUITE)],
    ids=["native-runner", "python-runner", "conformance-bounded_call"],
)
def test_interpreter_exit_waits_for_abandoned_calls_in_native_code(native: str, abandon: str) -> None:
    """Without the exit drain (the runners') or the exit settle (the conformance suite's),
    the abandoned call's daemon thread meets a finalizing interpreter inside torch and the
    process aborts ("terminate called without an active exception", exit status -6)."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    if native == "1" and abandon is _ON_A_RUNNER and not native_runner():
        pytest.skip("the native module did not build")
    env = {**os.environ, "HICACHE_NATIVE_RUNNER": native}
    script = _EXIT_SCRIPT.format(abandon=abandon)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
