"""The transport kit's parts: failure reasons, segments and copies, fan-out,
the existence cache and cancel tokens."""

from __future__ import annotations

import contextlib
import ctypes
import socket
import threading
import time

import pytest

from hicache_sdk.errors import Cancelled
from hicache_sdk.kit import CancelToken, FailureReasons, FanOut
from hicache_sdk.kit import segments as seg
from hicache_sdk.kit.existence import CachedExistence
from hicache_sdk.memory import MemoryTransport, drop_store


def buf(data: bytes) -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(data, len(data))


# -- failure reasons -----------------------------------------------------------------------


def test_failure_reasons_count_forward_and_replay() -> None:
    f = FailureReasons()
    f.count("disk_full")
    got: list[tuple[str, int]] = []
    f.bind(lambda r, n: got.append((r, n)))
    assert got == [("disk_full", 1)]  # replayed at bind
    f.count("permission", 3)
    assert got == [("disk_full", 1), ("permission", 3)]
    assert f.snapshot() == {"disk_full": 1, "permission": 3}


@pytest.mark.parametrize("bad", ["", "Disk Full", "a/b", "x" * 65, None, "path=/etc/passwd"])
def test_failure_reason_must_be_a_token(bad: object) -> None:
    with pytest.raises(ValueError, match="failure reason"):
        FailureReasons().count(bad)  # type: ignore[arg-type]


def test_transport_failures_reach_adapter_metrics_and_stats() -> None:
    from hicache_sdk.memory import MemoryStorage
    from hicache_sdk.spec import HiCacheStorageConfig

    s = MemoryStorage(HiCacheStorageConfig(extra_config={"store": "kit-fail"}), {})
    try:
        s.raw_transport.count_failure("disk_full", 2)
        assert s.metrics.errors()["disk_full"] == 2
        assert s.transport.failures is s.raw_transport.failures
    finally:
        s.close()
        drop_store("kit-fail")


# -- segments --------------------------------------------------------------------------------


@pytest.fixture(params=["native", "python"])
def copies(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each copy implementation: the C extension (where it built) and the ctypes fallback."""
    if request.param == "native" and not seg.NATIVE:
        pytest.skip("hicache_sdk._copy was not built")
    if request.param == "python":
        monkeypatch.setattr(seg, "_native", None)
    return str(request.param)


def test_gather_scatter_copy_runs(copies: str) -> None:
    a, b = buf(b"hello "), buf(b"world")
    pieces = [(ctypes.addressof(a), 6), (ctypes.addressof(b), 5)]
    dst = buf(b"\0" * 11)
    assert seg.gather(pieces, ctypes.addressof(dst)) == 11
    assert dst.raw == b"hello world"
    src = buf(b"HELLO WORLD")
    assert seg.scatter(ctypes.addressof(src), pieces) == 11
    assert a.raw == b"HELLO " and b.raw == b"WORLD"
    x, y = buf(b"0123456789"), buf(b"\0" * 10)
    xa, ya = ctypes.addressof(x), ctypes.addressof(y)
    assert seg.copy_runs([(ya, xa, 4), (ya + 4, xa + 4, 6)]) == 10
    assert y.raw == b"0123456789"
    assert seg.copy_runs([]) == 0 and seg.copy_runs([(0, 0, 0)]) == 0
    with pytest.raises(ValueError):
        seg.copy_runs([(0, xa, 4)])


def test_copy_checks_every_entry_before_copying(copies: str) -> None:
    x, y = buf(b"abcd"), buf(b"\0\0\0\0")
    xa, ya = ctypes.addressof(x), ctypes.addressof(y)
    for bad in [(ya, 0, 4), (ya, xa, -1)]:
        with pytest.raises(ValueError, match="bad copy run"):
            seg.copy_runs([(ya, xa, 4), bad])
        assert y.raw == b"\0\0\0\0"  # nothing moved


def test_copy_releases_the_gil(copies: str) -> None:
    """Another thread keeps running while one large copy is in progress."""
    n = 256 << 20
    src, dst = ctypes.create_string_buffer(n), ctypes.create_string_buffer(n)
    ticks = [0]
    done = threading.Event()

    def spin() -> None:
        while not done.is_set():
            ticks[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.01)
    before = ticks[0]
    seg.copy_runs([(ctypes.addressof(dst), ctypes.addressof(src), n)] * 4)
    during = ticks[0] - before
    done.set()
    t.join()
    assert during > 1000  # with the GIL held for the copies the spinner would stall


def test_copies_of_odd_runs_land_exactly(copies: str) -> None:
    """Runs of odd sizes (empty, 1 byte, around the 16 B / 64 B / 4 KiB steps, MiBs) at
    every misalignment of source and destination land exactly; nothing around them is
    written; a run that overlaps itself has memmove semantics. (12 MiB in all: the C
    extension streams the runs of 64 KiB or more.)"""
    import random

    rng = random.Random(7)
    n = 12 << 20
    src = bytes(rng.getrandbits(8) for _ in range(8191)) * (n // 8191 + 1)
    sbuf, dbuf = (
        ctypes.create_string_buffer(src[:n], n),
        ctypes.create_string_buffer(b"\x5a" * (n + 8192), n + 8192),
    )
    s0, d0 = ctypes.addressof(sbuf), ctypes.addressof(dbuf)
    runs, off, gap = [], 0, 0
    sizes = [0, 1, 7, 4095, 4096, 4097, 65_536 + 15, 100_003, 1 << 20, (1 << 20) + 17, 5, 63, 64]
    while off < n - (2 << 20):
        size = rng.choice(sizes)
        gap += rng.randrange(0, 16)  # destination misaligned by 0..15 bytes more each time
        runs.append((d0 + off + gap, s0 + off + rng.randrange(0, 2), size))
        off += size + 1
    assert gap < 8192
    assert seg.copy_runs(runs) == sum(r[2] for r in runs)
    expect = bytearray(b"\x5a" * (n + 8192))
    for d, s_, size in runs:
        expect[d - d0 : d - d0 + size] = src[s_ - s0 : s_ - s0 + size]
    assert dbuf.raw == bytes(expect)
    m = 6 << 20
    ov = ctypes.create_string_buffer(src[:m], m)
    o0 = ctypes.addressof(ov)
    seg.copy_runs([(o0 + 4096 + 8, o0, m - 8192)])
    assert ov.raw[4096 + 8 : m - 4096 + 8] == src[: m - 8192]


def test_memoryviews_share_memory_and_coalesce() -> None:
    a = buf(b"abcdef")
    base = ctypes.addressof(a)
    views = seg.memoryviews([(base, 2), (base + 2, 0), (base + 2, 4)])
    assert [bytes(v) for v in views] == [b"ab", b"cdef"]
    views[1][0] = ord("X")
    assert a.raw == b"abXdef"
    assert seg.coalesce([(base, 2), (base + 2, 0), (base + 2, 4), (base + 100, 1)]) == [
        (base, 6),
        (base + 100, 1),
    ]
    assert seg.total_bytes([(base, 2), (base + 2, 4)]) == 6


# -- fan-out ---------------------------------------------------------------------------------


def test_fanout_keeps_order_and_bounds_concurrency() -> None:
    f = FanOut(3)
    live, peak = [0], [0]
    lock = threading.Lock()

    def work(x: int) -> int:
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.002)
        with lock:
            live[0] -= 1
        return x * x

    assert f.map(work, list(range(30))) == [x * x for x in range(30)]
    assert peak[0] == 3
    f.close()
    assert f.map(work, [2, 3]) == [4, 9]  # after close: in the calling thread


def test_fanout_raises_after_every_part_ended() -> None:
    f = FanOut(2)
    ended: list[int] = []

    def work(x: int) -> int:
        if x == 0:
            raise RuntimeError("boom")
        time.sleep(0.05)
        ended.append(x)
        return x

    with pytest.raises(RuntimeError, match="boom"):
        f.map(work, [0, 1])
    assert ended == [1]  # the other part finished before the error surfaced
    f.close()
    with pytest.raises(ValueError, match="workers"):
        FanOut(0)


# -- existence cache -------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_cached_existence_remembers_hits_only_and_invalidates() -> None:
    inner = MemoryTransport("kit-cache")
    clock = Clock()
    c = CachedExistence(inner, 10.0, clock=clock)
    calls: list[list[str]] = []
    real = inner.exists

    def spy(keys: list[str]) -> list[int | None]:
        calls.append(list(keys))
        return real(keys)

    inner.exists = spy  # type: ignore[method-assign]
    data = buf(b"abc")
    assert c.write(["a"], [[(ctypes.addressof(data), 3)]]) == [True]
    assert c.exists(["a", "b"]) == [3, None]
    assert calls == [["b"]]  # "a" came from the write, "b" (a miss) went to the store
    assert c.exists(["b"]) == [None] and calls[-1] == ["b"]  # misses are never cached
    inner.delete(["a"])  # removed behind the cache's back: still reported (the documented price)
    assert c.exists(["a"]) == [3]
    out = buf(b"\0\0\0")
    assert c.read(["a"], [[(ctypes.addressof(out), 3)]]) == [False]  # the read fails ...
    assert c.exists(["a"]) == [None]  # ... and the entry is gone
    assert c.write(["a"], [[(ctypes.addressof(data), 3)]]) == [True]
    c.delete(["a"])
    assert c.exists(["a"]) == [None]
    assert c.write(["p/x"], [[(ctypes.addressof(data), 3)]]) == [True]
    c.clear("p/")
    assert c.exists(["p/x"]) == [None]
    assert c.write(["t"], [[(ctypes.addressof(data), 3)]]) == [True]
    n = len(calls)
    clock.t = 10.5  # expired
    assert c.exists(["t"]) == [3] and len(calls) == n + 1
    c.close()
    drop_store("kit-cache")


def test_cached_existence_through_the_adapter_config() -> None:
    from hicache_sdk.memory import MemoryStorage
    from hicache_sdk.spec import HiCacheStorageConfig

    s = MemoryStorage(HiCacheStorageConfig(extra_config={"store": "kit-c2", "exists_cache_ttl_s": -1}), {})
    try:
        assert isinstance(s.transport.inner, CachedExistence)  # type: ignore[attr-defined]
        assert s.transport.inner.ttl_s == -1  # type: ignore[attr-defined]
    finally:
        s.close()
        drop_store("kit-c2")
    with pytest.raises(ValueError, match="ttl_s"):
        CachedExistence(MemoryTransport("kit-c3"), 0)
    drop_store("kit-c3")


# -- cancel tokens ---------------------------------------------------------------------------


def test_cancel_waits_for_the_guarded_section_and_blocks_later_ones() -> None:
    tok = CancelToken()
    inside, release, cancelled = threading.Event(), threading.Event(), threading.Event()
    order: list[str] = []

    def worker() -> None:
        with tok.guard():
            inside.set()
            release.wait(5)
            order.append("touch")
        cancelled.wait(5)
        try:
            with tok.guard():
                order.append("never")
        except Cancelled:
            order.append("refused")

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(5)
    canceller = threading.Thread(target=lambda: (tok.cancel(), order.append("cancelled"), cancelled.set()))
    canceller.start()
    time.sleep(0.05)
    assert order == []  # cancel() is waiting for the guarded touch to end
    release.set()
    canceller.join(5)
    t.join(5)
    assert order == ["touch", "cancelled", "refused"] and tok.cancelled
    with pytest.raises(Cancelled):
        tok.check()


def test_guards_on_different_threads_never_wait_for_each_other() -> None:
    """One transfer split over connections guards on several threads: each has its own lane,
    so one thread's touch never waits for another's; cancel() waits for all of them."""
    tok = CancelToken()
    a_inside, a_release = threading.Event(), threading.Event()
    order: list[str] = []

    def a() -> None:
        with tok.guard():
            a_inside.set()
            a_release.wait(5)
            order.append("a")

    ta = threading.Thread(target=a)
    ta.start()
    assert a_inside.wait(5)

    def b() -> None:
        with tok.guard():
            order.append("b")

    tb = threading.Thread(target=b)
    tb.start()
    tb.join(2)
    assert not tb.is_alive() and order == ["b"]  # b's guard did not wait for a's
    canceller = threading.Thread(target=lambda: (tok.cancel(), order.append("cancelled")))
    canceller.start()
    time.sleep(0.05)
    assert "cancelled" not in order  # a is still inside its guard
    a_release.set()
    canceller.join(5)
    ta.join(5)
    assert order == ["b", "a", "cancelled"]


def test_on_cancel_interrupts_a_blocking_receive_then_cancel_returns() -> None:
    """A blocking receive under the guard, ended by the interrupter (a socket shutdown):
    cancel() returns promptly, the remover reports that it ran, and nothing lands after."""
    a, b = socket.socketpair()
    tok = CancelToken()
    remove = tok.on_cancel(lambda: a.shutdown(socket.SHUT_RDWR))
    buf = bytearray(1 << 20)
    got: list[int | BaseException] = []

    def reader() -> None:
        try:
            with tok.guard():
                got.append(a.recv_into(memoryview(buf), 0, socket.MSG_WAITALL))
        except BaseException as e:
            got.append(e)

    t = threading.Thread(target=reader)
    t.start()
    b.sendall(b"x" * 1000)  # less than asked for: the receive stays blocked
    time.sleep(0.1)
    t0 = time.monotonic()
    tok.cancel()
    assert time.monotonic() - t0 < 1.0
    t.join(5)
    assert got == [1000]  # what had arrived, and the receive returned
    snapshot = bytes(buf)
    with contextlib.suppress(OSError):  # after the cancel: the socket is shut, nothing lands
        b.sendall(b"y" * 1000)
    time.sleep(0.05)
    assert bytes(buf) == snapshot and remove() is True
    with pytest.raises(Cancelled), tok.guard():
        pass
    a.close()
    b.close()


def test_on_cancel_removed_before_cancel_never_runs() -> None:
    tok = CancelToken()
    ran: list[int] = []
    remove = tok.on_cancel(lambda: ran.append(1))
    assert remove() is False
    tok.cancel()
    assert ran == []
    late: list[int] = []
    assert tok.on_cancel(lambda: late.append(1))() is True  # already cancelled: runs at once
    assert late == [1]


def test_first_occurrences_keeps_each_names_first_copy() -> None:
    from hicache_sdk.kit import first_occurrences

    assert first_occurrences(["a", "b"]) is None
    assert first_occurrences([]) is None
    assert first_occurrences(["a", "b", "a", "c", "b"]) == ([0, 1, 3], [0, 1, 0, 2, 1])
