"""``ResilientTransport.exists`` against a transport that answers each call as scripted:
answers, error reasons, breaker states."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from resilience_fakes import Cfg, FakeClock, MisbehavingTransport

from hicache_sdk.resilience import FailureInjector, Metrics
from hicache_sdk.resilience.resilient import ResilientTransport
from hicache_sdk.transport import SIZE_UNKNOWN, ExactSizes, TransportError, exact_sizes


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


def _make(clock: FakeClock, exists_s: float = 0.03) -> tuple[ResilientTransport, Metrics, Scripted]:
    t = Scripted()
    m = Metrics()
    cfg = Cfg(exists_timeout_s=exists_s, breaker_failures=2, breaker_reset_s=1.0)
    return ResilientTransport(t, cfg, m, injector=FailureInjector(), clock=clock), m, t


@pytest.mark.parametrize(
    ("what", "reason"),
    [
        ("error", "connection"),
        ("crash", "bug:RuntimeError"),
        ("wrong_count", "transport_contract"),
        ("not_a_list", "transport_contract"),
        ("slow", "deadline"),
    ],
)
def test_a_failed_query_is_all_absent_and_counted_then_the_exists_breaker_opens(
    what: str, reason: str
) -> None:
    clock = FakeClock()
    w, m, t = _make(clock)
    try:
        assert w.exists(["a", "b", "c"]) == [2, 1, None]
        for i in range(2):
            t.next = what
            t.release.clear()
            assert w.exists(["a", "b", "c"]) == [None, None, None]
            t.release.set()
            assert w.abandoned == 0 or w._runner.drain(5)
            assert m.errors()[reason] == i + 1
        assert w.exists_breaker.state == "open" and w.breaker.state == "closed"
        assert w.exists(["a"]) == [None] and m.errors()["exists_breaker_open"] == 1  # fails fast
        snap = m.snapshot()["ops"]["t_exists"]
        assert (snap["calls"], snap["failures"], snap["pages"]) == (4, 3, 2)
        clock.advance(1.5)  # past the back-off: the next query is the probe, and closes it
        assert w.exists(["a", "b", "c"]) == [2, 1, None] and w.exists_breaker.state == "closed"
    finally:
        t.release.set()
        w.close()


def test_a_value_error_from_the_transport_propagates() -> None:
    w, m, t = _make(FakeClock())
    t.next = "value_error"
    with pytest.raises(ValueError, match="bad keys"):
        w.exists(["a"])
    assert m.errors() == {} and w.exists_breaker.state == "closed"
    w.close()


def test_a_failure_counted_during_a_call_is_reset_by_its_success() -> None:
    """A failure another caller counts while this query runs is reset by this query's
    success."""
    w, _, t = _make(FakeClock(), exists_s=5.0)
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


class SizedOnAsk(MisbehavingTransport, ExactSizes):
    """``exists`` knows no sizes; ``exact_sizes`` does (as Mooncake's ``get_size``)."""

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        return [SIZE_UNKNOWN if a is not None else None for a in super().exists(keys)]

    def exact_sizes(self, keys: Sequence[str]) -> list[int | None]:
        if self.next == "slow":
            threading.Event().wait(0.3)
        return super().exists(keys)


def test_exact_sizes_are_offered_only_where_the_transport_offers_them() -> None:
    plain, _, _ = _make(FakeClock())
    assert plain.offers(ExactSizes) is None
    assert exact_sizes(plain, ["a", "zz"]) == [2, None]  # the fallback: exists
    sized = SizedOnAsk()
    sized.store.update({"a": b"12", "b": b"3"})
    sized.next = "ok"
    m = Metrics()
    rt = ResilientTransport(sized, Cfg(exists_timeout_s=0.05), m, injector=FailureInjector())
    assert rt.offers(ExactSizes) is rt
    assert rt.exists(["a", "b", "zz"]) == [SIZE_UNKNOWN, SIZE_UNKNOWN, None]
    assert exact_sizes(rt, ["a", "b", "zz"]) == [2, 1, None]
    sized.next = "slow"  # past the exists deadline: absent, as exists answers then
    assert rt.exact_sizes(["a"]) == [None]
    assert m.snapshot()["errors"].get("deadline", 0) >= 1
