"""The policy objects: built from the config keys by default, injected by a backend or a user;
``Retry`` repeats I/O failures only, never past the deadline."""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

import pytest
from resilience_fakes import Buf, Cfg, FakeClock, MisbehavingTransport

import hicache_sdk
from hicache_sdk.errors import Cancelled
from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.resilience import (
    Breaker,
    ConstantBackoff,
    Deadline,
    ExponentialBackoff,
    FailureInjector,
    Metrics,
    NoBackoff,
    Resilience,
    ResilientTransport,
    Retry,
    Staging,
    wrap_transport,
)
from hicache_sdk.spec import HiCacheStorageConfig
from hicache_sdk.transport import TransportError


def _io(e: BaseException) -> bool:
    return isinstance(e, (TransportError, OSError))


class Fails:
    """Raises the given exceptions in turn, then answers ``"ok"``."""

    def __init__(self, *errors: BaseException, clock: FakeClock | None = None, step: float = 0.0) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.clock, self.step = clock, step

    def __call__(self) -> str:
        self.calls += 1
        if self.clock is not None:
            self.clock.advance(self.step)
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_retry_repeats_io_failures_up_to_its_count() -> None:
    seen: list[BaseException] = []
    fn = Fails(OSError("a"), TransportError("b", "connection"))
    assert Retry(retries=2).call(fn, is_io=_io, on_retry=seen.append) == "ok"
    assert fn.calls == 3 and [str(e) for e in seen] == ["a", "b"]
    fn = Fails(OSError("a"), OSError("b"), OSError("c"))
    with pytest.raises(OSError, match="c"):
        Retry(retries=2).call(fn, is_io=_io)
    assert fn.calls == 3
    fn = Fails(OSError("a"))
    with pytest.raises(OSError):
        Retry().call(fn, is_io=_io)  # the default: one attempt
    assert fn.calls == 1


@pytest.mark.parametrize("error", [RuntimeError("bug"), ValueError("bad"), Cancelled()])
def test_retry_never_repeats_a_bug_a_value_error_or_a_cancel(error: BaseException) -> None:
    fn = Fails(error)
    with pytest.raises(type(error)):
        Retry(retries=5).call(fn, is_io=_io)
    assert fn.calls == 1


def test_retry_never_starts_an_attempt_past_the_deadline() -> None:
    clock = FakeClock()
    slept: list[float] = []
    fn = Fails(*[OSError(str(i)) for i in range(10)], clock=clock, step=0.3)
    with pytest.raises(OSError, match="3"):  # attempts at 0, 0.4, 0.8 (+0.1 pause each); 1.2 > 1.0
        Retry(ConstantBackoff(0.1), 9).call(
            fn, is_io=_io, until=clock() + 1.0, clock=clock, sleep=slept.append
        )
    assert fn.calls == 4 and slept == [0.1, 0.1, 0.1]


def test_backoffs() -> None:
    assert NoBackoff().compute(3) == 0.0
    assert ConstantBackoff(0.2).compute(1) == ConstantBackoff(0.2).compute(9) == 0.2
    exp = ExponentialBackoff(base_s=0.01, cap_s=0.05, jitter=False)
    assert [exp.compute(n) for n in (1, 2, 3, 4)] == [0.01, 0.02, 0.04, 0.05]
    jittered = ExponentialBackoff(base_s=0.01, cap_s=1.0)
    assert all(0.01 <= jittered.compute(2) <= 0.02 for _ in range(50))  # half of 0.02 to all of it
    for bad in (  # type: ignore[arg-type]
        lambda: Retry(retries=-1),
        lambda: Retry(retries=True),
        lambda: ConstantBackoff(-1),
        lambda: Retry(0.1, 1),
        lambda: Retry(True),
    ):
        with pytest.raises(ValueError):
            bad()


def test_retry_takes_redis_pys_argument_order() -> None:
    """``Retry(backoff, retries)``, as ``redis.retry.Retry``; the 0.1 order (retries first)
    is refused with the change to make."""
    r = Retry(ConstantBackoff(0.5), 3)
    assert r.backoff == ConstantBackoff(0.5) and r.retries == 3
    assert [f.name for f in dataclasses.fields(Retry)] == ["backoff", "retries"]
    with pytest.raises(ValueError, match=r"back-off first.*Retry\(NoBackoff\(\), 2\)"):
        Retry(2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="back-off first"):
        Retry(2, ConstantBackoff(0.1))  # type: ignore[arg-type]


def test_policies_from_the_config_keys() -> None:
    cfg = Cfg(
        exists_timeout_s=0.3,
        transfer_timeout_s=2.0,
        breaker_failures=7,
        breaker_reset_s=0.5,
        max_abandoned=3,
        staging_bytes=1 << 20,
    )
    p = Resilience.from_config(cfg)
    assert p == Resilience(Deadline(0.3, 2.0, 3), Breaker(7, 0.5), Staging(1 << 20), Retry())
    assert p.deadline.seconds("exists") == p.deadline.seconds("health") == 0.3
    assert p.deadline.seconds("read") == p.deadline.seconds("delete") == 2.0
    assert p.staging.chunk_bytes == 1 << 18
    b = p.breaker.create(clock=FakeClock())
    assert b.state == "closed"
    for bad in (lambda: Deadline(-1), lambda: Breaker(0), lambda: Staging(callers=0)):
        with pytest.raises(ValueError):
            bad()


def test_a_transport_wrapped_with_a_retry_policy_recovers_within_the_deadline() -> None:
    t = MisbehavingTransport()
    t.store["a"] = b"x" * 8
    calls: list[int] = []
    real = t.read

    def flaky(keys: Any, buffers: Any) -> list[bool]:
        calls.append(1)
        if len(calls) <= 2:
            raise ConnectionResetError("reset by peer")
        return real(keys, buffers)

    t.read = flaky  # type: ignore[method-assign]
    m = Metrics()
    policies = dataclasses.replace(Resilience.from_config(Cfg(breaker_failures=1)), retry=Retry(retries=2))
    w = wrap_transport(t, policies, m, injector=FailureInjector())
    assert isinstance(w, ResilientTransport) and w.policies.retry == Retry(retries=2)
    buf = Buf(8)
    assert w.read(["a"], [buf.segs()]) == [True] and buf.bytes() == b"x" * 8
    assert len(calls) == 3 and m.counter("retries") == 2 and m.errors() == {"ConnectionResetError": 2}
    assert w.breaker.state == "closed"  # the call succeeded: no breaker failure
    w.close()


def test_retries_stay_within_the_deadline() -> None:
    t = MisbehavingTransport()
    t.delay["read"] = 0.1
    t.raise_["read"] = TransportError("down", "connection")
    m = Metrics()
    policies = dataclasses.replace(
        Resilience.from_config(Cfg(transfer_timeout_s=0.25, breaker_failures=100)),
        retry=Retry(ConstantBackoff(0.02), 20),
    )
    w = wrap_transport(t, policies, m, injector=FailureInjector())
    t0 = time.monotonic()
    assert w.read(["a"], [Buf(8).segs()]) == [False]
    assert time.monotonic() - t0 < 0.25 + 0.2
    assert w._runner.drain(2)
    assert 2 <= t.n("read") <= 3  # no attempt started after the 0.25 s deadline
    w.close()


class RetryingStorage(MemoryStorage):
    def create_resilience(self) -> Resilience:
        return dataclasses.replace(super().create_resilience(), retry=Retry(ExponentialBackoff(), 3))


def test_a_backend_injects_its_policies() -> None:
    store = f"pol-{uuid.uuid4().hex}"
    try:
        extra = {"store": store, "transfer_timeout_s": 1.5, "breaker_failures": 9}
        s = RetryingStorage(HiCacheStorageConfig(extra_config=extra), {})
        p = s.transport.policies  # type: ignore[attr-defined]
        assert p.retry == Retry(ExponentialBackoff(), 3)
        assert p.deadline.transfer_s == 1.5 and p.breaker == Breaker(9, 1.0)
        plain = MemoryStorage(HiCacheStorageConfig(extra_config={"store": store}), {})
        assert plain.transport.policies == Resilience.from_config(plain.config)  # type: ignore[attr-defined]
        s.close()
        plain.close()
    finally:
        drop_store(store)


def test_public_names_keep_working() -> None:
    assert hicache_sdk.FailureInjector is FailureInjector
    assert hicache_sdk.wrap_transport is wrap_transport
    from hicache_sdk.resilience.deadline import DeadlineRunner, PyDeadlineRunner
    from hicache_sdk.resilience.resilient import Quarantine, ResilienceConfig  # noqa: F401

    assert PyDeadlineRunner is DeadlineRunner


def test_replacing_the_policies_changes_the_deadline_of_later_calls() -> None:
    t = MisbehavingTransport()
    t.store["a"] = b"x" * 8
    w = wrap_transport(t, Cfg(transfer_timeout_s=5.0), Metrics(), injector=FailureInjector())
    assert isinstance(w, ResilientTransport)
    assert w.read(["a"], [Buf(8).segs()]) == [True] and t.threads[-1].startswith("hicache-io")
    w.policies = dataclasses.replace(w.policies, deadline=Deadline(0.2, 0.0, 8))  # inline from now on
    assert w.read(["a"], [Buf(8).segs()]) == [True] and t.threads[-1] == "MainThread"
    w.close()
