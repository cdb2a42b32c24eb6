"""The resilience layer's quiet ``exists`` path (both breakers quiet, no injector, one chunk:
answered without asking the breakers) against the general path, step by step over scripted
transport behaviour: the same answers, metrics, breaker states and raised errors."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from resilience_fakes import Cfg, FakeClock, MisbehavingTransport

from hicache_sdk.resilience import FailureInjector, Metrics
from hicache_sdk.resilience.breaker import CircuitBreaker
from hicache_sdk.resilience.resilient import ResilientTransport
from hicache_sdk.transport import TransportError

BEHAVIOURS = ["ok", "error", "value_error", "wrong_count", "not_a_list", "slow", "crash"]


class Scripted(MisbehavingTransport):
    """``exists`` does what ``self.next`` says, once."""

    def __init__(self) -> None:
        super().__init__()
        self.store.update({"a": b"12", "b": b"3"})
        self.next = "ok"
        self.release = threading.Event()
        self.entered = threading.Event()

    def exists(self, keys: Sequence[str]) -> Any:
        self.entered.set()
        what, self.next = self.next, "ok"
        if what == "error":
            raise TransportError("down", reason="connection")
        if what == "value_error":
            raise ValueError("bad keys")
        if what == "crash":
            raise RuntimeError("bug")
        if what == "wrong_count":
            return [None]
        if what == "not_a_list":
            return (None,) * len(keys)
        if what == "slow":
            self.release.wait(5)
        return super().exists(keys)


def _make(quiet: bool, clock: FakeClock) -> tuple[ResilientTransport, Metrics, Scripted]:
    t = Scripted()
    m = Metrics()
    cfg = Cfg(exists_timeout_s=0.03, breaker_failures=2, breaker_reset_s=1.0)
    # an inactive injector is still an injector: it sends every call the general way
    w = ResilientTransport(t, cfg, m, injector=None if quiet else FailureInjector(), clock=clock)
    return w, m, t


def _figures(m: Metrics) -> dict[str, Any]:
    snap = m.snapshot()
    for op in snap["ops"].values():
        del op["seconds"], op["latency_counts"]
    return snap


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(BEHAVIOURS), st.booleans()), min_size=1, max_size=8))
def test_quiet_path_matches_the_general_path(steps: list[tuple[str, bool]]) -> None:
    clock = FakeClock()
    pair = [_make(True, clock), _make(False, clock)]
    try:
        for what, later in steps:
            seen = []
            for w, m, t in pair:
                t.next = what
                t.release.clear()
                try:
                    got: object = w.exists(["a", "b", "c"])
                except ValueError as e:
                    got = ("ValueError", str(e))
                if what == "slow":
                    t.release.set()
                    assert w._runner.drain(5)
                seen.append((got, _figures(m), w.breaker.state, w.exists_breaker.state))
            assert seen[0] == seen[1], what
            if later:
                clock.advance(1.5)  # past the back-off: the next call may be the probe
    finally:
        for w, _, t in pair:
            t.release.set()
            w.close()


def test_quiet_path_is_the_one_taken_when_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """The general path asks the breakers; the quiet one does not (nothing to ask)."""
    w, m, t = _make(True, FakeClock())
    asked: list[str] = []
    real = CircuitBreaker.allow

    def spy(self: CircuitBreaker) -> tuple[bool, bool]:
        asked.append("allow")
        return real(self)

    monkeypatch.setattr(CircuitBreaker, "allow", spy)
    assert w.exists(["a", "b", "c"]) == [2, 1, None] and asked == []
    assert m.snapshot()["ops"]["t_exists"]["pages"] == 2
    t.next = "error"
    assert w.exists(["a"]) == [None] and asked == []  # the failure is counted...
    assert not w.exists_breaker.quiet
    assert w.exists(["a"]) == [2] and asked == ["allow", "allow"]  # ...so the next asks, and resets
    assert w.exists_breaker.quiet and w.exists(["a"]) == [2] and asked == ["allow", "allow"]
    w.close()


def test_a_failure_counted_during_a_quiet_call_is_reset_by_its_success() -> None:
    """The quiet path skips ``record_success`` only while nothing was counted: a failure
    another caller counts while this query runs is reset by this query's success, as the
    general path's ``record_success`` does."""
    w, _, t = _make(True, FakeClock())
    w._exists_s = 5.0
    t.next = "slow"
    got: list[object] = []
    caller = threading.Thread(target=lambda: got.append(w.exists(["a"])))
    caller.start()
    assert t.entered.wait(5)  # the query is in the transport
    w.exists_breaker.record_failure()  # another caller's failure, meanwhile
    assert not w.exists_breaker.quiet
    t.release.set()
    caller.join(5)
    assert got == [[2]] and w.exists_breaker.quiet
    w.close()
