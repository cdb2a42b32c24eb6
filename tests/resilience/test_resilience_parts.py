"""Unit tests of the resilience building blocks: breaker, deadline runner, staging pool,
failure injector, chunking."""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from resilience_fakes import Buf, Cfg, FakeClock, MisbehavingTransport

from hicache_sdk.config import BackendConfig
from hicache_sdk.resilience import FailureInjector, Metrics, Resilience, set_inside_sglang, wrap_transport
from hicache_sdk.resilience.breaker import CircuitBreaker
from hicache_sdk.resilience.deadline import DeadlineRunner, can_follow_cpu
from hicache_sdk.resilience.inject import is_inside_sglang
from hicache_sdk.resilience.policies import Staging
from hicache_sdk.resilience.staging import MIN_BUFFER, StagingPool
from hicache_sdk.transport import TransportError

# -- breaker ----------------------------------------------------------------------------


def test_breaker_states_with_clock() -> None:
    clock = FakeClock()
    seen: list[str] = []
    b = CircuitBreaker(2, 1.0, clock=clock, on_state=seen.append)
    assert b.allow() == (True, False)
    b.record_failure()
    b.record_success()  # success resets the consecutive count
    b.record_failure()
    assert b.state == "closed"
    b.record_failure()
    assert b.state == "open" and b.allow() == (False, False)
    clock.advance(1.0)
    assert b.allow() == (True, True) and b.state == "half_open"
    assert b.allow() == (False, False)  # one probe at a time
    b.record_failure()
    assert b.state == "open"
    clock.advance(1.0)
    assert b.allow() == (True, True)
    b.record_success()
    assert b.state == "closed" and b.allow() == (True, False)
    assert seen == ["open", "half_open", "open", "half_open", "closed"]


def test_breaker_lost_probe_and_hold() -> None:
    clock = FakeClock()
    b = CircuitBreaker(1, 1.0, clock=clock, start_open=True)
    assert b.state == "open"
    clock.advance(1.0)
    assert b.allow() == (True, True)
    clock.advance(1.0)  # the probe never reported: another is allowed
    assert b.allow() == (True, True)
    b.record_success()
    b.set_held(True)
    assert b.state == "open" and b.allow() == (False, False)
    b.set_held(False)
    assert b.state == "closed"
    with pytest.raises(ValueError, match="failures"):
        CircuitBreaker(0, 1.0)
    with pytest.raises(ValueError, match="reset_s"):
        CircuitBreaker(1, -1.0)


@given(st.lists(st.sampled_from(["ok", "fail", "tick", "allow"]), max_size=40), st.integers(1, 4))
def test_breaker_matches_reference_model(events: list[str], threshold: int) -> None:
    """Against a tiny reference model: never allows while open before the back-off, a
    probe is the only call let through while half-open."""
    clock = FakeClock()
    b = CircuitBreaker(threshold, 1.0, clock=clock)
    state, fails, opened, probe_at = "closed", 0, clock.t, 0.0
    for ev in events:
        if ev == "tick":
            clock.advance(0.6)
        elif ev == "ok":
            b.record_success()
            fails = 0
            state = "closed" if state == "half_open" else state
        elif ev == "fail":
            b.record_failure()
            fails += 1
            if state == "half_open" or (state == "closed" and fails >= threshold):
                state, opened = "open", clock.t
        else:
            got = b.allow()
            if state == "closed":
                exp = (True, False)
            elif (state == "open" and clock.t - opened >= 1.0) or (
                state == "half_open" and clock.t - probe_at >= 1.0
            ):
                exp, state, probe_at = (True, True), "half_open", clock.t
            else:
                exp = (False, False)
            assert got == exp
        assert b.state == state


# -- deadline runner ----------------------------------------------------------------------


def test_runner_result_error_and_abandon(runner_cls: type[DeadlineRunner]) -> None:
    changes: list[int] = []
    r = runner_cls(2, on_abandon_change=changes.append)
    c = r.submit(lambda: 42)
    assert r.wait(c, 5) and c.result == 42 and c.error is None
    c = r.submit(lambda: 1 / 0)
    assert r.wait(c, 5) and isinstance(c.error, ZeroDivisionError)
    gate = threading.Event()
    late: list[bool] = []
    c = r.submit(gate.wait, on_late=lambda call: late.append(call.started))
    assert not r.wait(c, 0.02)
    assert r.abandoned == 1 and changes == [1]
    gate.set()
    assert c.wait_done(5)
    assert r.drain(5) and r.abandoned == 0 and late == [True] and changes == [1, 0]
    r.shutdown()
    with pytest.raises(RuntimeError):
        r.submit(lambda: 0)
    with pytest.raises(ValueError, match="max_workers"):
        runner_cls(0)


def test_runner_skips_call_abandoned_in_queue(runner_cls: type[DeadlineRunner]) -> None:
    r = runner_cls(1)
    gate = threading.Event()
    ran: list[int] = []
    first = r.submit(gate.wait)
    second = r.submit(lambda: ran.append(1))
    late: list[bool] = []
    second.on_late = lambda call: late.append(call.started)
    assert not r.wait(second, 0.02)
    gate.set()
    assert r.wait(first, 5)
    assert r.drain(5) and ran == [] and late == [False]
    assert r.pending == 0
    r.shutdown()


def test_runner_is_bounded_and_reuses_threads(runner_cls: type[DeadlineRunner]) -> None:
    r = runner_cls(3)
    for _ in range(20):
        c = r.submit(lambda: threading.current_thread().name)
        assert r.wait(c, 5)
    assert r._started == 1
    gates = [threading.Event() for _ in range(5)]
    calls = [r.submit(g.wait) for g in gates]
    time.sleep(0.05)
    assert r._started == 3  # bounded: two of the five wait in the backlog
    for g in gates:
        g.set()
    assert all(r.wait(c, 5) for c in calls)
    assert r.pending == 0 or r.drain(5)
    # back-to-back calls go to the worker that went idle last: always the same warm thread
    names = []
    for _ in range(10):
        c = r.submit(lambda: threading.current_thread().name)
        assert r.wait(c, 5)
        names.append(c.result)
    assert len(set(names)) == 1, names
    r.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        r.submit(lambda: None)


@pytest.mark.skipif(
    not can_follow_cpu() or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and two CPUs",
)
def test_runner_wakes_worker_on_callers_cpu_and_runs_the_call_unpinned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = os.sched_setaffinity
    events: list[tuple[str, int, set[int]]] = []

    def spy(pid: int, mask: Iterable[int]) -> None:
        events.append(("pin", pid, set(mask)))
        real(pid, mask)

    monkeypatch.setattr(os, "sched_setaffinity", spy)
    full = os.sched_getaffinity(0)
    a, b = sorted(full)[:2]

    def job() -> int:
        events.append(("run", threading.get_native_id(), os.sched_getaffinity(0)))
        return threading.get_native_id()

    seen: dict[str, object] = {}

    def caller() -> None:  # a thread of its own: pinning it leaves the test's thread alone
        me = threading.get_native_id()
        r = DeadlineRunner(1, follow_caller_cpu=True)
        off = DeadlineRunner(1)  # the default: no affinity is ever changed
        try:
            seen["follows"] = (r.follows_caller_cpu, off.follows_caller_cpu)
            c = r.submit(job)  # spawns the worker (with this thread's full mask)
            assert r.wait(c, 5)
            seen["tid"] = c.result
            del events[:]
            for cpu in (a, b, a):  # the worker is woken on the caller's CPU, each time
                real(me, {cpu})
                c = r.submit(job)
                assert r.wait(c, 5)
            seen["follow"] = list(events)
            del events[:]
            for _ in range(2):
                c = off.submit(job)
                assert off.wait(c, 5)
            seen["off"] = list(events)
        finally:
            r.shutdown()
            off.shutdown()

    t = threading.Thread(target=caller)
    t.start()
    t.join(10)
    tid = seen["tid"]
    assert seen["follows"] == (True, False)
    # pinned to the caller's CPU before the wake, its own mask back before the call runs
    want = []
    for cpu in (a, b, a):
        want += [("pin", tid, {cpu}), ("pin", tid, full), ("run", tid, full)]
    assert seen["follow"] == want
    # not following: no affinity change; the worker keeps the mask it inherited (the caller's)
    assert [e[0] for e in seen["off"]] == ["run", "run"]  # type: ignore[attr-defined]
    assert all(e[2] == {a} for e in seen["off"])  # type: ignore[attr-defined]


@pytest.mark.skipif(not can_follow_cpu(), reason="needs Linux")
def test_runner_stops_following_when_affinity_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(pid: int, mask: Iterable[int]) -> None:
        raise OSError(22, "Invalid argument")  # a cpuset that no longer holds the CPU

    r = DeadlineRunner(1, follow_caller_cpu=True)
    assert r.wait(r.submit(lambda: 1), 5)  # the worker exists and is idle
    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    for i in range(3):  # every call still runs; the first refusal turns following off
        c = r.submit(lambda i=i: i)  # type: ignore[misc]
        assert r.wait(c, 5) and c.result == i
    assert not r.follows_caller_cpu
    r.shutdown()


# -- staging pool -------------------------------------------------------------------------


def test_staging_reuse_alignment_and_bound() -> None:
    usage: list[tuple[int, int]] = []
    p = StagingPool(1 << 20, on_usage=lambda a, b: usage.append((a, b)))
    a = p.acquire(100)
    assert a is not None and a.nbytes == MIN_BUFFER and a.address % 4096 == 0
    ctypes.memset(a.address, 7, a.nbytes)
    p.release(a)
    b = p.acquire(MIN_BUFFER)
    assert b is a  # cached and reused
    big = p.acquire(600 << 10)  # rounds to 1 MiB: must evict nothing busy -> no room
    assert big is None
    p.release(b)
    big = p.acquire(600 << 10)  # now the cached 64 KiB buffer is unmapped to make room
    assert big is not None and big.nbytes == 1 << 20 and not a.mapped
    assert p.reserved == 1 << 20 and p.acquire(1) is None
    p.release(big)
    assert p.in_use == 0 and usage[-1] == (0, 1 << 20)
    assert p.close() == 0 and not big.mapped
    assert p.acquire(1) is None
    with pytest.raises(ValueError, match="nbytes"):
        StagingPool(10).acquire(-1)


def test_staging_register_hooks_and_failure() -> None:
    regs: list[int] = []
    unregs: list[int] = []
    p = StagingPool(1 << 20, register=lambda a, n: regs.append(n), unregister=lambda a, n: unregs.append(n))
    buf = p.acquire(10)
    assert buf is not None and regs == [MIN_BUFFER]
    p.release(buf)
    p.close()
    assert unregs == [MIN_BUFFER]

    def bad(a: int, n: int) -> None:
        raise RuntimeError("no")

    q = StagingPool(1 << 20, register=bad)
    assert q.acquire(10) is None and q.reserved == 0


def test_staging_close_leaks_busy_then_frees_on_release() -> None:
    p = StagingPool(1 << 20)
    busy = p.acquire(10)
    idle = p.acquire(10)
    assert busy is not None and idle is not None
    p.release(idle)
    assert p.close() == MIN_BUFFER
    assert busy.mapped and not idle.mapped
    ctypes.memset(busy.address, 1, busy.nbytes)  # the abandoned I/O may still write
    p.release(busy)
    assert not busy.mapped
    assert p.close() == 0


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 300_000)), max_size=30))
def test_staging_never_exceeds_capacity(ops: list[tuple[bool, int]]) -> None:
    cap = 512 << 10
    p = StagingPool(cap)
    held = []
    for acquire, n in ops:
        if acquire or not held:
            b = p.acquire(n)
            if b is not None:
                assert b.nbytes >= n
                held.append(b)
        else:
            p.release(held.pop(0))
        assert p.reserved <= cap
        spans = sorted((b.address, b.address + b.nbytes) for b in held)
        assert all(x[1] <= y[0] for x, y in itertools.pairwise(spans))  # no overlap
    p.close()


# -- chunking -----------------------------------------------------------------------------


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=40), st.integers(1, 8000))
def test_chunks_partition_and_respect_limit(sizes: list[int], limit: int) -> None:
    chunks = Staging(capacity=limit, callers=1).chunks(sizes)
    assert chunks[0][0] == 0 and chunks[-1][1] == len(sizes)
    assert all(a < b for a, b in chunks)
    assert all(x[1] == y[0] for x, y in itertools.pairwise(chunks))
    for a, b in chunks:
        assert b - a == 1 or sum(sizes[a:b]) <= limit


@given(
    st.one_of(
        st.lists(st.integers(0, 70_000), min_size=1, max_size=30),
        st.tuples(st.integers(0, 70_000), st.integers(1, 30)).map(lambda t: [t[0]] * t[1]),
    )
)
def test_staging_slots_are_aligned_disjoint_and_packed(sizes: list[int]) -> None:
    """Each object's staging slot starts 4 KiB-aligned (64 B below 4 KiB), slots follow one
    another without overlap or gap beyond that alignment, also on the one-size fast path
    and for empty objects."""
    offs, need = Staging.slots(sizes)
    assert len(offs) == len(sizes) and offs[0] == 0
    pos = 0
    for off, n in zip(offs, sizes):
        step = 4096 if n >= 4096 else 64
        assert off == -(-pos // step) * step  # the next aligned place, no wider gap
        pos = off + -(-n // step) * step
    assert need == pos


# -- failure injection --------------------------------------------------------------------


def test_injector_from_env() -> None:
    assert FailureInjector.from_env({}) is None
    inj = FailureInjector.from_env(
        {"HICACHE_INJECT_FAILURE_RATE": "1", "HICACHE_INJECT_OPS": "read, write", "HICACHE_INJECT_SEED": "3"}
    )
    assert inj is not None and inj.failure_rate == 1.0 and inj.ops == {"read", "write"} and inj.seed == 3
    inj = FailureInjector.from_env({"HICACHE_INJECT_DELAY_S": "0.5"})
    assert inj is not None and inj.delay_s == 0.5 and inj.ops == {"exists", "read", "write"}
    with pytest.raises(ValueError, match="HICACHE_INJECT_DELAY_S"):
        FailureInjector.from_env({"HICACHE_INJECT_DELAY_S": "soon"})
    with pytest.raises(ValueError, match="HICACHE_INJECT_OPS"):
        FailureInjector.from_env({"HICACHE_INJECT_FAILURE_RATE": "0.5", "HICACHE_INJECT_OPS": "reed"})
    with pytest.raises(ValueError, match="failure_rate"):
        FailureInjector(failure_rate=2.0)


def test_sglang_variables_only_when_asked() -> None:
    env = {
        "SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY": "0.2",
        "SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE": "0.3",
    }
    assert FailureInjector.from_env(env) is None  # SGLang's variables are SGLang's
    inj = FailureInjector.from_env({**env, "HICACHE_INJECT_FAILURE_RATE": "0.9"})
    assert inj is not None and inj.failure_rate == 0.9 and inj.delay_s == 0.0
    inj = FailureInjector.from_env(env, sglang_variables=True)
    assert inj is not None and inj.delay_s == 0.2 and inj.failure_rate == 0.3
    inj = FailureInjector.from_env({**env, "HICACHE_INJECT_FAILURE_RATE": "0.9"}, sglang_variables=True)
    assert inj is not None and inj.failure_rate == 0.9 and inj.delay_s == 0.2  # ours wins
    with pytest.warns(DeprecationWarning, match="does nothing"):
        set_inside_sglang(True)  # no process-wide flag any more
    assert is_inside_sglang() is False
    assert FailureInjector.from_env(env, sglang_variables=True) is not None


def test_the_environment_injects_nothing_unless_a_config_opts_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from hicache_sdk.memory import MemoryStorage, drop_store
    from hicache_sdk.spec import HiCacheStorageConfig

    monkeypatch.setenv("HICACHE_INJECT_FAILURE_RATE", "1.0")
    monkeypatch.setenv("SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE", "1.0")
    t = MisbehavingTransport()
    t.store["k"] = b"x" * 16
    w = wrap_transport(t, Cfg(breaker_failures=100), Metrics())  # reads no environment
    dst = Buf(16)
    assert w.read(["k"], [dst.segs()]) == [True]
    w.close()
    store = f"inject-{os.getpid()}-{time.monotonic_ns()}"
    try:
        plain = MemoryStorage(HiCacheStorageConfig(extra_config={"store": store}))
        opted = MemoryStorage(HiCacheStorageConfig(extra_config={"store": store, "inject_failures": True}))
        assert not plain.config.inject_failures and opted.config.inject_failures
        assert plain.transport.exists(["k"]) == [None] and plain.metrics.errors() == {}
        assert opted.transport.exists(["k"]) == [None] and opted.metrics.errors() == {"injected": 1}
        plain.close()
        opted.close()
    finally:
        drop_store(store)
    monkeypatch.setenv("HICACHE_INJECT_FAILURES", "1")  # the opt-in, from the environment
    assert BackendConfig.from_mapping({}).inject_failures is True


def test_follow_caller_cpu_is_an_opt_in_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert BackendConfig().follow_caller_cpu is False
    assert Resilience.from_config(BackendConfig()).deadline.follow_caller_cpu is False
    on = BackendConfig.from_mapping({"follow_caller_cpu": True})
    assert Resilience.from_config(on).deadline.follow_caller_cpu is True
    assert Resilience.from_config(Cfg()).deadline.follow_caller_cpu is False  # a config without it
    monkeypatch.setenv("HICACHE_FOLLOW_CPU", "1")
    assert BackendConfig.from_mapping({}).follow_caller_cpu is True
    t = MisbehavingTransport()
    w = wrap_transport(t, Resilience.from_config(on), Metrics())
    assert w._runner.follows_caller_cpu is can_follow_cpu()
    w.close()
    w = wrap_transport(t, BackendConfig(), Metrics())
    assert w._runner.follows_caller_cpu is False
    w.close()


def test_injected_failures_become_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HICACHE_INJECT_FAILURE_RATE", "1.0")
    monkeypatch.setenv("HICACHE_INJECT_OPS", "read")
    t = MisbehavingTransport()
    t.store["k"] = b"x" * 16
    m = Metrics()
    w = wrap_transport(t, Cfg(breaker_failures=100), m, injector=FailureInjector.from_env())  # opted in
    dst = Buf(16)
    assert w.read(["k"], [dst.segs()]) == [False]
    assert w.exists(["k"]) == [16]  # not a selected op
    assert m.errors() == {"injected": 1} and t.n("read") == 0
    w.set_injector(None)
    assert w.read(["k"], [dst.segs()]) == [True] and dst.bytes() == b"x" * 16
    w.close()


def test_injector_from_code_delay_hits_deadline() -> None:
    t = MisbehavingTransport()
    t.store["k"] = b"x" * 16
    slept: list[float] = []
    inj = FailureInjector(delay_s=0.4, ops=frozenset({"exists"}), seed=2)  # first draw: 0.38 s
    m = Metrics()
    w = wrap_transport(t, Cfg(exists_timeout_s=0.03), m, injector=inj)
    t0 = time.monotonic()
    assert w.exists(["k"]) == [None]  # the injected delay ran inside the deadline
    assert time.monotonic() - t0 < 0.03 + 0.3
    assert m.counter("deadline_exists") == 1
    assert inj.injected_delays == 1
    w.set_injector(FailureInjector(delay_s=0.05, ops=frozenset({"exists"}), sleep=slept.append))
    assert w.exists(["k"]) == [16] and len(slept) == 1 and 0 <= slept[0] <= 0.05
    w.close()


def test_injected_failure_rate_is_statistical() -> None:
    inj = FailureInjector(failure_rate=0.3, ops=frozenset({"read"}), seed=7)
    fails = 0
    for _ in range(2000):
        try:
            inj.before("read")
        except TransportError as e:
            assert e.reason == "injected"
            fails += 1
    assert 450 < fails < 750 and inj.injected_failures == fails
    inj.before("write")  # not selected: never fails
