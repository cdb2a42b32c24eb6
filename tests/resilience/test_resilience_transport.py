"""ResilientTransport against a transport that misbehaves on purpose."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from resilience_fakes import Buf, Cfg, FakeClock, FakeQuarantine, HealthTransport, MisbehavingTransport

from hicache_sdk.config import BackendConfig
from hicache_sdk.resilience import FailureInjector, Metrics, ResilientTransport, wrap_transport
from hicache_sdk.transport import TransportError

SLACK = 0.6  # generous: this machine is small and noisy


def make(t: MisbehavingTransport, cfg: Cfg | None = None, **kw: object) -> tuple[ResilientTransport, Metrics]:
    m = Metrics()
    kw.setdefault("injector", FailureInjector())  # never pick up injection from the environment
    w = wrap_transport(t, cfg or Cfg(), m, **kw)  # type: ignore[arg-type]
    return w, m


def wait_for(pred, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.005)
    return pred()


# -- basic behaviour --------------------------------------------------------------------


def test_roundtrip_with_deadline_goes_through_staging() -> None:
    t = MisbehavingTransport()
    w, m = make(t)
    src = [Buf(1000, fill=i + 1) for i in range(3)]
    assert w.write(["a", "b", "c"], [b.segs(3) for b in src]) == [True, True, True]
    assert t.store["b"] == bytes([2]) * 1000
    assert w.exists(["a", "zz", "c"]) == [1000, None, 1000]
    dst = [Buf(1000) for _ in range(3)]
    assert w.read(["a", "missing", "c"], [d.segs(2) for d in dst]) == [True, False, True]
    assert dst[0].bytes() == bytes([1]) * 1000 and dst[2].bytes() == bytes([3]) * 1000
    assert dst[1].bytes() == bytes(1000)  # a miss copies nothing
    # the transport only ever saw SDK-owned staging, never the caller's buffers
    caller = {d.addr for d in dst} | {s.addr for s in src}
    for call in t.seen_buffers:
        for segs in call:
            assert len(segs) == 1 and segs[0][0] not in caller
    assert m.counter("staging_copies_out") == 3
    assert m.counter("staging_copies_in") == 2
    snap = m.snapshot()
    assert snap["ops"]["t_read"]["pages"] == 2 and snap["ops"]["t_read"]["bytes"] == 2000
    assert snap["ops"]["t_write"]["pages"] == 3
    assert snap["ops"]["t_exists"]["calls"] == 1
    assert w.staging.in_use == 0
    w.close()


@pytest.mark.parametrize("sizes", [[5000] * 6, [1, 63, 64, 4095, 4096, 9000], [70_000, 3, 70_000]])
def test_staged_roundtrip_odd_sizes_one_slot_per_object(sizes: list[int]) -> None:
    """One size or mixed sizes, one or several segments per object: the transport sees each
    object as one aligned slot of exactly its size in staging, and the bytes come back
    exactly; a missing object leaves its destination untouched."""
    t = MisbehavingTransport()
    w, m = make(t)
    keys = [f"k{i}" for i in range(len(sizes))]
    src = [Buf(n, fill=i + 7) for i, n in enumerate(sizes)]
    wrote = w.write(keys, [b.segs(1 + i % 3 if b.n >= 3 else 1) for i, b in enumerate(src)])
    assert wrote == [True] * len(sizes)
    assert [t.store[k] for k in keys] == [bytes([i + 7]) * n for i, n in enumerate(sizes)]
    dst = [Buf(n, fill=0xEE) for n in sizes]
    ask = [*keys[:-1], "absent"]
    got = w.read(ask, [d.segs(1 + i % 2 if d.n >= 2 else 1) for i, d in enumerate(dst)])
    assert got == [True] * (len(sizes) - 1) + [False]
    for i, (d, n) in enumerate(zip(dst, sizes)):
        assert d.bytes() == (bytes([i + 7]) * n if i < len(sizes) - 1 else b"\xee" * n)
    for call in t.seen_buffers:
        for segs, n in zip(call, sizes):
            assert len(segs) == 1 and segs[0][1] == n
            assert segs[0][0] % (4096 if n >= 4096 else 64) == 0
    assert m.counter("staging_copies_in") == len(sizes) - 1 and w.staging.in_use == 0
    w.close()


def test_zero_deadline_runs_inline_zero_copy() -> None:
    t = MisbehavingTransport()
    w, m = make(t, Cfg(exists_timeout_s=0, transfer_timeout_s=0))
    src = Buf(64, fill=7)
    assert w.write(["k"], [src.segs(2)]) == [True]
    dst = Buf(64)
    assert w.read(["k"], [dst.segs()]) == [True]
    assert dst.bytes() == bytes([7]) * 64
    assert t.seen_buffers[0] == [src.segs(2)] and t.seen_buffers[1] == [dst.segs()]
    assert set(t.threads) == {threading.current_thread().name}
    assert m.counter("staging_copies_in") == 0 and w.staging.reserved == 0
    w.close()


def test_empty_batches() -> None:
    t = MisbehavingTransport()
    w, _ = make(t)
    assert w.exists([]) == [] and w.read([], []) == [] and w.write([], []) == []
    assert t.calls == {}
    w.close()


def test_value_errors_propagate() -> None:
    t = MisbehavingTransport()
    w, _ = make(t)
    with pytest.raises(ValueError, match="buffers"):
        w.read(["a", "b"], [Buf(8).segs()])
    with pytest.raises(ValueError, match="buffers"):
        w.write(["a"], [[(Buf(8).addr, -1)]])
    t.raise_["read"] = ValueError("bad spans")
    with pytest.raises(ValueError, match="bad spans"):
        w.read(["a"], [Buf(8).segs()])
    assert w.staging.in_use == 0
    w.close()
    t2 = MisbehavingTransport()
    t2.raise_["exists"] = ValueError("bad keys")
    w2, _ = make(t2, Cfg(exists_timeout_s=0))
    with pytest.raises(ValueError, match="bad keys"):
        w2.exists(["a"])
    w2.close()


@pytest.mark.parametrize("inline", [False, True])
def test_errors_become_misses_with_reasons(inline: bool) -> None:
    t = MisbehavingTransport()
    cfg = (
        Cfg(exists_timeout_s=0, transfer_timeout_s=0, breaker_failures=10)
        if inline
        else Cfg(breaker_failures=10)
    )
    w, m = make(t, cfg)
    t.raise_["exists"] = TransportError("refused", reason="connection")
    t.raise_["read"] = RuntimeError("boom")
    t.raise_["write"] = OSError("disk")
    t.raise_["delete"] = TransportError("x", reason="timeout")
    assert w.exists(["a", "b"]) == [None, None]
    assert w.read(["a"], [Buf(8).segs()]) == [False]
    assert w.write(["a"], [Buf(8).segs()]) == [False]
    w.delete(["a"])  # swallowed
    assert m.errors() == {"connection": 1, "bug:RuntimeError": 1, "OSError": 1, "timeout": 1}
    assert m.snapshot()["ops"]["t_read"]["failures"] == 1
    assert w.staging.in_use == 0
    w.close()


def test_transport_contract_violation_is_a_miss() -> None:
    t = MisbehavingTransport()
    t.read = lambda keys, buffers: [True]  # type: ignore[method-assign]
    w, m = make(t)
    assert w.read(["a", "b"], [Buf(8).segs(), Buf(8).segs()]) == [False, False]
    assert m.errors() == {"transport_contract": 1}
    w.close()


def test_clear_and_delete_forward() -> None:
    t = MisbehavingTransport()
    w, _ = make(t)
    t.store.update({"p/1": b"x", "p/2": b"y", "q/1": b"z"})
    w.delete(["p/1", "nope"])
    w.clear("q/")
    assert t.store == {"p/2": b"y"} and t.cleared == ["q/"]
    w.close()
    assert t.closed


# -- deadlines --------------------------------------------------------------------------


def test_exists_deadline_returns_misses_in_time() -> None:
    t = MisbehavingTransport()
    t.store["a"] = b"1"
    t.delay["exists"] = 0.6
    w, m = make(t, Cfg(exists_timeout_s=0.05))
    t0 = time.monotonic()
    assert w.exists(["a", "b"]) == [None, None]
    assert time.monotonic() - t0 < 0.05 + SLACK
    assert m.counter("deadline_exists") == 1 and m.counter("abandoned_exists") == 1
    assert m.errors()["deadline"] == 1
    assert wait_for(lambda: m.counter("late_completions") == 1)
    assert w.abandoned == 0
    w.close()


def test_late_read_never_touches_caller_buffer() -> None:
    t = MisbehavingTransport()
    t.store["k"] = b"\xaa" * 4096
    t.delay["read"] = 0.3
    w, m = make(t, Cfg(transfer_timeout_s=0.05))
    dst = Buf(4096, fill=0x5C)
    t0 = time.monotonic()
    assert w.read(["k"], [dst.segs(4)]) == [False]
    assert time.monotonic() - t0 < 0.05 + SLACK
    assert m.counter("deadline_read") == 1 and m.counter("abandoned_reads") == 1
    assert w.staging.in_use > 0  # the abandoned read still owns its staging
    assert t.finished["read"].wait(5)  # the slow transport has now written... into staging
    assert wait_for(lambda: m.counter("late_completions") == 1)
    assert dst.bytes() == b"\x5c" * 4096  # sentinel intact
    assert m.counter("staging_copies_in") == 0
    assert wait_for(lambda: w.staging.in_use == 0)
    assert m.snapshot()["gauges"]["staging_bytes_in_use"] == 0
    w.close()


def test_timed_out_write_publishes_snapshot_or_nothing() -> None:
    t = MisbehavingTransport()
    t.delay["write"] = 0.3
    w, m = make(t, Cfg(transfer_timeout_s=0.05))
    src = Buf(8192, fill=0x11)
    assert w.write(["k"], [src.segs(2)]) == [False]
    src.fill(0x99)  # the caller reuses its slot right away
    assert t.finished["write"].wait(5)
    assert wait_for(lambda: m.counter("late_completions") == 1)
    assert t.store.get("k", b"\x11" * 8192) == b"\x11" * 8192
    assert "k" in t.store  # here the late write did publish: the snapshot
    assert m.counter("deadline_write") == 1 and m.counter("abandoned_writes") == 1
    assert m.counter("staging_copies_out") == 1
    w.close()


def test_queued_call_abandoned_before_start_is_skipped() -> None:
    t = MisbehavingTransport()
    gate = threading.Event()
    t.gate["write"] = gate
    # one caller thread, no abandoned budget beyond the cap -> 1 + 2 + 1 workers
    w, m = make(t, Cfg(transfer_timeout_s=0.05, max_abandoned=100))
    bufs = [Buf(16, fill=1) for _ in range(3)]
    ths = [threading.Thread(target=w.write, args=([f"k{i}"], [bufs[i].segs()])) for i in range(3)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(5)
    gate.set()
    assert wait_for(lambda: w.abandoned == 0)
    assert m.counter("abandoned_writes") == 3
    assert m.counter("late_completions") + m.counter("abandoned_skipped") == 3
    w.close()


# -- abandoned budget and breaker ---------------------------------------------------------


def test_abandoned_budget_opens_breaker_until_drained() -> None:
    t = MisbehavingTransport()
    gate = threading.Event()
    t.gate["exists"] = gate
    w, m = make(t, Cfg(exists_timeout_s=0.05, max_abandoned=2, breaker_failures=100))
    assert w.exists(["a"]) == [None]
    assert w.breaker.state == "closed"
    assert w.exists(["a"]) == [None]
    assert w.abandoned == 2
    assert w.breaker.state == "open" and m.snapshot()["gauges"]["breaker_state"] == "open"
    assert m.counter("abandoned_budget_exhausted") == 1
    t0 = time.monotonic()
    assert w.exists(["a"]) == [None]  # fails fast, never reaches the transport
    assert time.monotonic() - t0 < 0.05 + SLACK / 2
    assert t.n("exists") == 2 and m.counter("exists_refused_transfers_down") == 1
    assert m.errors()["breaker_open"] == 1
    gate.set()
    assert wait_for(lambda: w.abandoned == 0)
    assert w.breaker.state == "closed" and m.snapshot()["gauges"]["abandoned_calls"] == 0
    t.store["a"] = b"xy"
    assert w.exists(["a"]) == [2]
    w.close()


def test_breaker_open_half_open_close_with_injected_clock() -> None:
    t = MisbehavingTransport()
    clock = FakeClock()
    w, m = make(t, Cfg(breaker_failures=3, breaker_reset_s=1.0), clock=clock)
    t.raise_["read"] = TransportError("down", reason="connection")
    for _ in range(3):
        assert w.read(["a"], [Buf(3).segs()]) == [False]
    assert w.breaker.state == "open" and t.n("read") == 3
    assert w.read(["a"], [Buf(3).segs()]) == [False]
    assert t.n("read") == 3  # fail fast
    clock.advance(0.5)
    assert w.read(["a"], [Buf(3).segs()]) == [False] and t.n("read") == 3
    clock.advance(0.6)  # back-off elapsed: the next call is the probe; it fails
    assert w.read(["a"], [Buf(3).segs()]) == [False] and t.n("read") == 4
    assert w.breaker.state == "open"
    assert w.read(["a"], [Buf(3).segs()]) == [False] and t.n("read") == 4
    clock.advance(1.0)
    del t.raise_["read"]
    t.store["a"] = b"abc"
    assert w.read(["a"], [Buf(3).segs()]) == [True]  # the probe succeeds and closes the breaker
    assert w.breaker.state == "closed" and m.snapshot()["gauges"]["breaker_state"] == "closed"
    w.close()


def test_exists_failures_open_only_the_exists_breaker() -> None:
    """Issue 10.7: failing or slow existence queries never open the breaker transfers
    use; the exists breaker backs off and recovers on its own."""
    t = MisbehavingTransport()
    clock = FakeClock()
    w, m = make(t, Cfg(breaker_failures=2, breaker_reset_s=1.0), clock=clock)
    t.store["a"] = b"abc"
    t.raise_["exists"] = TransportError("down", reason="connection")
    for _ in range(2):
        assert w.exists(["a"]) == [None]
    assert w.exists_breaker.state == "open" and w.breaker.state == "closed"
    assert w.exists(["a"]) == [None] and t.n("exists") == 2  # fail fast
    assert m.errors()["exists_breaker_open"] == 1
    buf = Buf(3)
    assert w.read(["a"], [buf.segs()]) == [True] and buf.arr.raw == b"abc"  # transfers unaffected
    del t.raise_["exists"]
    clock.advance(1.1)  # the next query is the exists breaker's probe; it succeeds
    assert w.exists(["a"]) == [3]
    assert w.exists_breaker.state == "closed"
    assert m.snapshot()["gauges"]["exists_breaker_state"] == "closed"
    w.close()


def test_transfer_breaker_open_means_exists_reports_absent() -> None:
    """Issue 10.7, the other way round: while reads fail, a hit could not be read, so
    existence reports every page absent; the query then probes the transfer breaker."""
    t = MisbehavingTransport()
    clock = FakeClock()
    w, m = make(t, Cfg(breaker_failures=1, breaker_reset_s=1.0), clock=clock)
    t.store["a"] = b"abc"
    t.raise_["read"] = TransportError("down", reason="connection")
    assert w.read(["a"], [Buf(3).segs()]) == [False]
    assert w.breaker.state == "open"
    assert w.exists(["a"]) == [None] and t.n("exists") == 0
    assert m.counter("exists_refused_transfers_down") == 1
    del t.raise_["read"]
    clock.advance(1.1)
    assert w.exists(["a"]) == [3]  # this query was the probe (no health()): it closes the breaker
    assert w.breaker.state == "closed"
    w.close()


def test_large_exists_answers_its_prefix_at_the_deadline() -> None:
    """Issue 10.7: a query larger than one chunk is answered chunk by chunk; at the
    deadline the answered chunks stand and the worker stops before the next one."""
    from hicache_sdk.resilience.resilient import EXISTS_CHUNK

    t = MisbehavingTransport()
    n = EXISTS_CHUNK * 3
    keys = [f"k{i}" for i in range(n)]
    for k in keys:
        t.store[k] = b"x"
    calls: list[int] = []
    gate = threading.Event()
    real = t.exists

    def slow_after_first(ks: list[str]) -> list[int | None]:
        calls.append(len(ks))
        if len(calls) > 1:
            gate.wait(5)
        return real(ks)

    t.exists = slow_after_first  # type: ignore[method-assign]
    w, m = make(t, Cfg(exists_timeout_s=1.0))  # the first chunk is quick; the second stalls
    out = w.exists(keys)
    assert out[:EXISTS_CHUNK] == [1] * EXISTS_CHUNK
    assert out[EXISTS_CHUNK:] == [None] * (n - EXISTS_CHUNK)
    assert m.counter("deadline_exists") == 1 and w.breaker.state == "closed"
    gate.set()
    assert wait_for(lambda: w.abandoned == 0)
    assert calls == [EXISTS_CHUNK, EXISTS_CHUNK]  # the third chunk was never asked
    w.close()


def test_half_open_uses_health_probe_when_declared() -> None:
    t = HealthTransport()
    clock = FakeClock()
    w, _ = make(t, Cfg(breaker_failures=1, breaker_reset_s=1.0), clock=clock, probe_at_start=False)
    t.raise_["read"] = TransportError("down", reason="connection")
    assert w.read(["a"], [Buf(1).segs()]) == [False]
    assert w.breaker.state == "open"
    clock.advance(1.5)
    t.health_ok = False
    assert w.read(["a"], [Buf(1).segs()]) == [False]
    assert t.n("health") == 1 and t.n("read") == 1  # the probe was health(), and it failed
    assert w.breaker.state == "open"
    clock.advance(1.5)
    t.health_ok = True
    del t.raise_["read"]
    assert w.read(["a"], [Buf(1).segs()]) == [False]  # health ok -> closed -> the real call runs (a miss)
    assert t.n("health") == 2 and t.n("read") == 2 and w.breaker.state == "closed"
    w.close()


def test_deadlines_count_as_breaker_failures() -> None:
    t = MisbehavingTransport()
    t.delay["read"] = 0.2
    w, _ = make(t, Cfg(transfer_timeout_s=0.03, breaker_failures=2))
    assert w.read(["a"], [Buf(8).segs()]) == [False]
    assert w.read(["a"], [Buf(8).segs()]) == [False]
    assert w.breaker.state == "open"
    w.close()


def test_start_open_and_probe_at_start() -> None:
    t = MisbehavingTransport()
    w, _ = make(t, start_open=True, clock=FakeClock())
    assert w.breaker.state == "open" and w.exists(["a"]) == [None] and t.n("exists") == 0
    w.close()

    t2 = HealthTransport()
    t2.health_ok = False
    w2, m2 = make(t2)  # health capability -> probed at start
    assert w2.breaker.state == "open" and m2.counter("breaker_start_open") == 1
    w2.close()

    t3 = HealthTransport()
    t3.gate["health"] = threading.Event()  # a service that hangs
    t0 = time.monotonic()
    w3, _ = make(t3, Cfg(exists_timeout_s=0.05))
    assert time.monotonic() - t0 < 0.05 + SLACK
    assert w3.breaker.state == "open"
    t3.gate["health"].set()
    w3.close()

    t4 = HealthTransport()
    w4, _ = make(t4)
    assert w4.breaker.state == "closed" and t4.n("health") == 1
    w4.close()


def test_recovers_when_service_appears() -> None:
    t = HealthTransport()
    t.health_ok = False
    clock = FakeClock()
    w, _ = make(t, Cfg(breaker_reset_s=1.0), clock=clock)
    assert w.breaker.state == "open"
    t.health_ok = True
    t.store["a"] = b"1"
    assert w.exists(["a"]) == [None]  # still backing off
    clock.advance(1.0)
    assert w.exists(["a"]) == [1]
    assert w.breaker.state == "closed"
    w.close()


# -- staging limits and close ---------------------------------------------------------------


def test_large_batch_is_chunked_through_bounded_staging() -> None:
    t = MisbehavingTransport()
    w, _ = make(t, Cfg(staging_bytes=1 << 20))  # chunks of 256 KiB
    page = 64 << 10
    src = [Buf(page, fill=i + 1) for i in range(10)]
    keys = [f"k{i}" for i in range(10)]
    assert w.write(keys, [s.segs(2) for s in src]) == [True] * 10
    assert t.n("write") == 3
    dst = [Buf(page) for _ in range(10)]
    assert w.read(keys, [d.segs() for d in dst]) == [True] * 10
    assert all(d.bytes() == bytes([i + 1]) * page for i, d in enumerate(dst))
    assert w.staging.reserved <= 1 << 20 and w.staging.in_use == 0
    w.close()


def test_staging_exhausted_fails_fast() -> None:
    t = MisbehavingTransport()
    w, m = make(t, Cfg(staging_bytes=64 << 10))
    assert w.read(["k"], [Buf(128 << 10).segs()]) == [False]
    assert w.write(["k"], [Buf(128 << 10).segs()]) == [False]
    assert t.n("read") == 0 and t.n("write") == 0
    assert m.errors()["staging_exhausted"] == 2 and m.counter("staging_exhausted") == 2
    w.close()


def test_register_memory_hook_called_for_staging() -> None:
    t = MisbehavingTransport()
    regs: list[tuple[int, int]] = []
    t.register_memory = lambda a, n: regs.append((a, n))  # type: ignore[attr-defined]
    w, _ = make(t)
    t.store["k"] = b"z" * 100
    d1, d2 = Buf(100), Buf(100)
    assert w.read(["k"], [d1.segs()]) == [True]
    assert w.read(["k"], [d2.segs()]) == [True]  # reuses the cached, registered buffer
    assert d1.bytes() == d2.bytes() == b"z" * 100
    assert len(regs) == 1 and regs[0][1] >= 100 and regs[0][0] % 4096 == 0
    w.close()


def test_close_waits_bounded_then_leaks_busy_staging() -> None:
    t = MisbehavingTransport()
    gate = threading.Event()
    t.gate["read"] = gate
    w, m = make(t, Cfg(transfer_timeout_s=0.05), close_timeout_s=0.1)
    t.store["k"] = b"q" * 1000
    dst = Buf(1000, fill=1)
    assert w.read(["k"], [dst.segs()]) == [False]
    t0 = time.monotonic()
    w.close()
    assert time.monotonic() - t0 < 0.1 + SLACK
    leaked = m.counter("staging_leaked_bytes")
    assert leaked >= 1000
    assert w.read(["k"], [dst.segs()]) == [False] and m.errors()["closed"] == 1
    assert w.exists(["k"]) == [None] and not w.health()
    gate.set()  # the abandoned read ends, writing into the (still mapped) leaked buffer
    assert t.finished["read"].wait(5)
    assert wait_for(lambda: m.counter("late_completions") == 1)
    assert dst.bytes() == b"\x01" * 1000
    w.close()  # idempotent
    assert m.counter("staging_leaked_bytes") == leaked


def test_caller_does_not_own_memory_uses_quarantine() -> None:
    t = MisbehavingTransport()
    t.store["k"] = b"r" * 64
    q = FakeQuarantine()
    w, m = make(t, Cfg(transfer_timeout_s=0.05), caller_owns_memory=False, quarantine=q)
    dst = Buf(64)
    assert w.read(["k"], [dst.segs()]) == [True]
    assert dst.bytes() == b"r" * 64 and t.seen_buffers[0] == [dst.segs()]  # zero-copy
    assert q.events == [("hold", 1), ("release", 1)]
    t.delay["read"] = 0.3
    assert w.read(["k"], [dst.segs()]) == [False]
    assert q.events[-1] == ("hold", 1)  # still held: the abandoned read may write there
    assert wait_for(lambda: q.events[-1] == ("release", 1))
    assert m.counter("staging_copies_in") == 0 and w.staging.reserved == 0
    w.close()
    with pytest.raises(ValueError, match="quarantine"):
        make(MisbehavingTransport(), caller_owns_memory=False)


def test_held_scope_passes_caller_memory_through_until_the_io_ends() -> None:
    t = MisbehavingTransport()  # not cancellable: outside the scope, reads are staged
    t.store["k"] = b"r" * 64
    w, m = make(t, Cfg(transfer_timeout_s=0.05))
    dst = Buf(64)
    assert w.read(["k"], [dst.segs()]) == [True] and m.counter("staging_copies_in") == 1
    q = FakeQuarantine()
    with w.held(q):
        assert w.read(["k"], [dst.segs()]) == [True]
        assert w.write(["w"], [dst.segs()]) == [True]
    assert t.seen_buffers[-2:] == [[dst.segs()], [dst.segs()]]  # the caller's memory, as is
    assert q.events == [("hold", 1), ("release", 1)] * 2
    assert m.counter("held_reads") == 1 and m.counter("held_writes") == 1
    assert (m.counter("staging_copies_in"), m.counter("staging_copies_out")) == (1, 0)
    t.delay["read"] = 0.3
    with w.held(q):
        assert w.read(["k"], [dst.segs()]) == [False]  # abandoned at the deadline ...
    assert q.events[-1] == ("hold", 1)  # ... and still held: its I/O may write there
    assert wait_for(lambda: q.events[-1] == ("release", 1))
    t.delay["read"] = 0.0
    assert w.read(["k"], [dst.segs()]) == [True]  # outside the scope: staged again
    assert m.counter("held_reads") == 2 and m.counter("staging_copies_in") == 2
    w.close()


def test_wrap_is_idempotent_and_accepts_backend_config() -> None:
    t = MisbehavingTransport()
    m = Metrics()
    w = wrap_transport(t, BackendConfig(), m, injector=FailureInjector())
    assert isinstance(w, ResilientTransport) and wrap_transport(w, BackendConfig(), m) is w
    assert w.inner is t and w.capabilities == t.capabilities and w.max_segments == t.max_segments
    w.close()


# -- races around the deadline --------------------------------------------------------------


def test_reads_racing_the_deadline_are_all_or_nothing() -> None:
    """Delays straddle the deadline: each result is either True with the right bytes, or
    False with the sentinel intact, even after every late read has ended."""
    import random

    t = MisbehavingTransport()
    t.store.update({f"k{i}": bytes([i + 1]) * 2048 for i in range(4)})
    w, m = make(t, Cfg(transfer_timeout_s=0.02, breaker_failures=10_000, max_abandoned=1000))
    rng = random.Random(5)
    outcomes: list[tuple[list[bool], list[Buf]]] = []
    for _ in range(25):
        t.delay["read"] = rng.uniform(0.0, 0.04)
        dst = [Buf(2048, fill=0xEE) for _ in range(4)]
        outcomes.append((w.read([f"k{i}" for i in range(4)], [d.segs(3) for d in dst]), dst))
    assert wait_for(lambda: w.abandoned == 0)
    for res, dst in outcomes:
        assert len(set(res)) == 1  # one transport call per batch here
        for i, (ok, d) in enumerate(zip(res, dst)):
            assert d.bytes() == (bytes([i + 1]) * 2048 if ok else b"\xee" * 2048)
    assert m.counter("abandoned_reads") == m.counter("late_completions") + m.counter("abandoned_skipped")
    assert wait_for(lambda: w.staging.in_use == 0)
    w.close()


def test_concurrent_callers_share_bounded_staging() -> None:
    t = MisbehavingTransport()
    w, m = make(t, Cfg(transfer_timeout_s=2.0, staging_bytes=1 << 20))
    errors: list[BaseException] = []

    def worker(tid: int) -> None:
        try:
            for r in range(10):
                keys = [f"t{tid}-{r}-{j}" for j in range(4)]
                src = [Buf(32 << 10, fill=(tid * 16 + r + j) % 256) for j in range(4)]
                assert w.write(keys, [s.segs(2) for s in src]) == [True] * 4
                dst = [Buf(32 << 10) for _ in range(4)]
                assert w.read(keys, [d.segs(2) for d in dst]) == [True] * 4
                assert [d.bytes() for d in dst] == [s.bytes() for s in src]
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(30)
    assert errors == []
    assert w.staging.reserved <= 1 << 20 and w.staging.in_use == 0
    assert m.snapshot()["ops"]["t_read"]["pages"] == 160
    w.close()


def test_staged_chunks_never_start_after_the_deadline_on_the_injected_clock() -> None:
    """Issue 10.9: a staged multi-chunk read whose first chunk takes the clock past the
    deadline runs no later chunk and copies nothing more into the caller's slots."""
    t = MisbehavingTransport()
    clock = FakeClock()
    page = 64 << 10
    for k in "abc":
        t.store[k] = bytes([ord(k)]) * page
    real = t.read

    def slow_read(keys, buffers):  # type: ignore[no-untyped-def]
        clock.advance(10.0)  # this chunk ends after the 5 s deadline (on the injected clock)
        return real(keys, buffers)

    t.read = slow_read  # type: ignore[method-assign]
    # chunks of staging_bytes / 4 = one page each: three chunks
    w, m = make(t, Cfg(transfer_timeout_s=5.0, staging_bytes=4 * page), clock=clock)
    bufs = [Buf(page) for _ in range(3)]
    assert w.read(list("abc"), [b.segs() for b in bufs]) == [True, False, False]
    assert t.n("read") == 1  # chunks two and three never started
    assert bufs[0].bytes() == b"a" * page
    assert bufs[1].bytes() == bytes(page) and bufs[2].bytes() == bytes(page)
    assert m.counter("deadline_read") == 1
    w.close()


def test_a_half_open_probe_counts_against_the_calls_deadline() -> None:
    """The breaker's health probe runs within the deadline of the call it admits: a slow
    probe that succeeds leaves the transfer only what remains."""
    t = HealthTransport()
    t.delay["health"] = 0.15
    gate = threading.Event()
    t.gate["read"] = gate
    w, m = make(t, Cfg(exists_timeout_s=0.2, transfer_timeout_s=0.3, breaker_reset_s=0), start_open=True)
    t0 = time.monotonic()
    assert w.read(["a"], [Buf(8).segs()]) == [False]
    took = time.monotonic() - t0
    assert t.n("health") == 1 and t.n("read") == 1  # the probe passed, the read ran and was abandoned
    assert 0.28 <= took < 0.3 + 0.1, took  # not 0.15 + 0.3: the probe took from the read
    assert m.counter("deadline_read") == 1
    gate.set()
    w.close()


def test_a_deadline_scope_bounds_every_call_inside_it() -> None:
    t = MisbehavingTransport()
    t.delay["read"] = 0.5
    w, m = make(t, Cfg(exists_timeout_s=0.2, transfer_timeout_s=1.0, breaker_failures=10))
    t0 = time.monotonic()
    with w.deadline_scope("exists"), w.deadline_scope("read"):  # an inner scope never extends
        assert w.read(["a"], [Buf(8).segs()]) == [False]  # abandoned at 0.2 s, not at 1 s
        assert time.monotonic() - t0 < 0.2 + SLACK / 3
        t.delay["read"] = 0
        assert w.read(["a"], [Buf(8).segs()]) == [False]  # the caller's deadline passed: not started
    assert t.n("read") == 1 and m.counter("deadline_read") == 2
    t.store["a"] = b"x" * 8
    assert w.read(["a"], [Buf(8).segs()]) == [True]  # outside the scope: its own deadline again
    w.close()


# -- ranged reads -------------------------------------------------------------------------


def test_ranged_reads_go_through_staging_and_answer_per_object() -> None:
    from hicache_sdk.transport import RangedReads, has_read_ranges

    t = MisbehavingTransport()
    t.store["a"] = bytes(range(256)) * 4
    t.store["b"] = b"\x07" * 100
    w, m = make(t)
    assert w.offers(RangedReads) is w and has_read_ranges(w) is has_read_ranges(t) is False
    d1, d2, d3 = Buf(8, fill=1), Buf(16, fill=1), Buf(4, fill=1)
    ranges = [(1020, [(d1.addr, 4), (d1.addr + 4, 0)]), (0, d2.segs(2))]
    got = w.read_ranges_batch(["a", "b", "missing"], [ranges, [(96, d3.segs())], [(0, [])]])
    assert got == [True, True, False]
    assert d1.bytes()[:4] == bytes([252, 253, 254, 255]) and d1.bytes()[4:] == b"\x01" * 4
    assert d2.bytes() == bytes(range(16)) and d3.bytes() == b"\x07" * 4
    past = Buf(8, fill=9)
    assert w.read_ranges("b", [(96, past.segs())]) is False  # past the end: a miss, untouched
    assert past.bytes() == b"\x09" * 8
    assert w.read_ranges("b", []) is True and w.read_ranges("missing", []) is False
    caller = {d.addr for d in (d1, d2, d3, past)}
    assert all(segs[0][0] not in caller for call in t.seen_buffers for segs in call if segs)
    snap = m.snapshot()["ops"]["t_read_ranges"]
    assert snap["calls"] == 4 and snap["bytes"] == 4 + 16 + 4
    with pytest.raises(ValueError, match=r"ranges\[0\]\[0\]: offset"):
        w.read_ranges_batch(["a"], [[(-1, d1.segs())]])
    with pytest.raises(ValueError, match="one per key"):
        w.read_ranges_batch(["a", "b"], [[]])
    assert w.staging.in_use == 0
    w.close()


def test_ranged_reads_reach_a_batching_transport_in_one_call() -> None:
    """A transport that offers RangedReads itself gets a batch in one call (staged as
    usual); a wrong number of answers is a failed call, never a partial answer."""
    from hicache_sdk.transport import Range, RangedReads

    class Batching(MisbehavingTransport, RangedReads):
        batches: list[int] = []
        short = False

        def read_ranges_batch(self, keys: Sequence[str], ranges: Sequence[Sequence[Range]]) -> list[bool]:
            self.batches.append(len(keys))
            got = [self.read_ranges(k, r) for k, r in zip(keys, ranges)]
            return got[:-1] if self.short else got

    t = Batching()
    t.store["a"], t.store["b"] = b"\x01" * 64, b"\x02" * 64
    w, _ = make(t)
    d1, d2 = Buf(8), Buf(8)
    assert w.read_ranges_batch(["a", "b", "c"], [[(8, d1.segs())], [(56, d2.segs())], []]) == [
        True,
        True,
        False,
    ]
    assert t.batches == [3] and d1.bytes() == b"\x01" * 8 and d2.bytes() == b"\x02" * 8
    t.short = True
    assert w.read_ranges_batch(["a", "b"], [[(0, d1.segs())], [(0, d2.segs())]]) == [False, False]
    w.close()


def test_late_ranged_read_never_touches_caller_memory_and_counts_for_the_breaker() -> None:
    t = MisbehavingTransport()
    t.store["k"] = b"\xaa" * 4096
    gate = t.gate["read"] = threading.Event()
    w, m = make(t, Cfg(transfer_timeout_s=0.05, breaker_failures=1, breaker_reset_s=60))
    dst = Buf(64, fill=0x5C)
    t0 = time.monotonic()
    assert w.read_ranges("k", [(100, dst.segs(2))]) is False
    assert time.monotonic() - t0 < 0.05 + SLACK
    assert m.counter("deadline_read") == 1 and m.counter("abandoned_reads") == 1
    assert w.staging.in_use > 0  # the abandoned ranged read still owns its staging
    assert w.breaker.state == "open"
    assert w.read_ranges("k", [(0, dst.segs())]) is False  # refused at once: breaker open
    assert m.snapshot()["errors"].get("breaker_open", 0) >= 1
    gate.set()
    assert t.finished["read"].wait(5)  # the slow read has now landed... in staging
    assert wait_for(lambda: m.counter("late_completions") == 1)
    assert dst.bytes() == b"\x5c" * 64
    assert wait_for(lambda: w.staging.in_use == 0)
    w.close()


def test_ranged_reads_inline_at_zero_deadline_and_quarantined_when_the_sdk_owns_memory() -> None:
    t = MisbehavingTransport()
    t.store["k"] = b"r" * 64
    w, _ = make(t, Cfg(transfer_timeout_s=0))
    dst = Buf(8)
    assert w.read_ranges("k", [(8, dst.segs())]) is True and dst.bytes() == b"r" * 8
    assert t.threads[-1] == threading.current_thread().name  # inline
    w.close()
    q = FakeQuarantine()
    w, _ = make(t, Cfg(transfer_timeout_s=0.05), caller_owns_memory=False, quarantine=q)
    t.delay["read"] = 0.3
    assert w.read_ranges("k", [(0, dst.segs()), (8, dst.segs())]) is False
    assert q.events == [("hold", 2)]  # held: the abandoned read may still write there
    assert wait_for(lambda: q.events[-1] == ("release", 2))
    w.close()
