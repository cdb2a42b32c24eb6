"""``NegativeCache`` (sgl-project/sglang#31315): objects the store reports present whose read
failed are answered absent for a TTL; plain misses are never remembered; a successful read
or write clears an entry; the size is bounded. Over the real in-memory transport, with
some objects made stale (present, unreadable)."""

from __future__ import annotations

import ctypes
import threading
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

import pytest

from hicache_sdk.kit import NegativeCache
from hicache_sdk.memory import MemoryStorage, MemoryTransport, drop_store
from hicache_sdk.metrics import Metrics
from hicache_sdk.spec import HiCacheStorageConfig
from hicache_sdk.transport import DeadlineScoped, Segments


class Stale(MemoryTransport):
    """The memory transport with stale objects: reported present, every read of one fails
    (until it is deleted, which ends the staleness). Counts calls."""

    def __init__(self, store: str) -> None:
        super().__init__(store)
        self.stale: set[str] = set()
        self.exists_calls: list[list[str]] = []
        self.reads: list[list[str]] = []

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        self.exists_calls.append(list(keys))
        return super().exists(keys)

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self.reads.append(list(keys))
        res = super().read(keys, buffers)
        return [ok and k not in self.stale for k, ok in zip(keys, res)]

    def delete(self, keys: Sequence[str]) -> None:
        self.stale.difference_update(keys)
        super().delete(keys)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def buf(data: bytes) -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(data, len(data))


def seg(b: ctypes.Array[ctypes.c_char]) -> list[tuple[int, int]]:
    return [(ctypes.addressof(b), len(b))]


@pytest.fixture
def stale() -> Stale:
    name = f"neg-{uuid.uuid4().hex}"
    t = Stale(name)
    yield t
    drop_store(name)


def _put(t: MemoryTransport, *names: str) -> None:
    data = [buf(b"abcd") for _ in names]
    assert t.write(list(names), [seg(d) for d in data]) == [True] * len(names)


def _read(c: NegativeCache, *names: str) -> list[bool]:
    out = [buf(b"\0" * 4) for _ in names]
    return c.read(list(names), [seg(o) for o in out])


def test_present_but_unreadable_is_answered_absent_for_the_ttl(stale: Stale) -> None:
    clock, m = Clock(), Metrics()
    c = NegativeCache(stale, 5.0, clock=clock, metrics=m)
    _put(stale, "a", "b")
    stale.stale.add("b")
    assert c.exists(["a", "b"]) == [4, 4]  # the store says both are there
    assert _read(c, "a", "b") == [True, False]  # ... but b cannot be read
    assert "b" in c and "a" not in c and len(c) == 1
    stale.exists_calls.clear()
    assert c.exists(["a", "b"]) == [4, None]  # b is a miss now ...
    assert stale.exists_calls == [["a"]]  # ... without asking the store about it
    clock.t = 5.0
    assert c.exists(["b"]) == [None]  # still within the TTL
    clock.t = 5.01
    assert c.exists(["b"]) == [4] and "b" not in c  # expired: the store is asked again
    snap = m.snapshot()["counters"]
    assert snap["negative_cache_added"] == 1 and snap["negative_cache_suppressed"] == 2


def test_a_plain_miss_is_never_remembered(stale: Stale) -> None:
    """Caching a miss would hide a page another instance writes a moment later."""
    c = NegativeCache(stale, 60.0, clock=Clock())
    assert _read(c, "x") == [False]  # absent in the store: a plain miss
    assert len(c) == 0
    _put(MemoryTransport(stale.store_name), "x")  # another instance writes it
    assert c.exists(["x"]) == [4]
    assert _read(c, "x") == [True]


def test_a_successful_read_or_write_clears_and_a_write_replaces_the_unreadable_copy(stale: Stale) -> None:
    c = NegativeCache(stale, 60.0, clock=Clock())
    _put(stale, "a", "b")
    stale.stale.update({"a", "b"})
    assert _read(c, "a", "b") == [False, False] and len(c) == 2
    stale.stale.discard("a")  # the store recovered a
    assert _read(c, "a") == [True] and "a" not in c  # a direct read succeeds: cleared
    data = buf(b"wxyz")
    assert c.write(["b"], [seg(data)]) == [True]  # deleted first, then really written
    assert "b" not in c and not stale.stale
    out = buf(b"\0" * 4)
    assert c.read(["b"], [seg(out)]) == [True] and out.raw == b"wxyz"


def test_without_the_delete_a_create_if_absent_write_would_keep_the_stale_copy(stale: Stale) -> None:
    """Why a write of a remembered object deletes it first: the store says the object
    exists, so its write leaves the unreadable copy and reports success."""
    _put(stale, "b")
    stale.stale.add("b")
    data = buf(b"wxyz")
    assert stale.write(["b"], [seg(data)]) == [True]  # success ...
    out = buf(b"\0" * 4)
    assert stale.read(["b"], [seg(out)]) == [False]  # ... and still unreadable


def test_size_is_bounded_oldest_first(stale: Stale) -> None:
    clock = Clock()
    c = NegativeCache(stale, 60.0, max_entries=3, clock=clock)
    for i, k in enumerate("abcde"):
        clock.t = float(i)
        c.remember([k])
    assert len(c) == 3 and [k in c for k in "abcde"] == [False, False, True, True, True]
    c.remember(["c"])  # refreshed: now the newest
    c.remember(["f"])
    assert [k in c for k in "cdef"] == [True, False, True, True]


def test_a_failing_probe_remembers_nothing(stale: Stale) -> None:
    c = NegativeCache(stale, 60.0, clock=Clock())
    _put(stale, "a")
    stale.stale.add("a")

    def broken(keys: Sequence[str]) -> list[int | None]:
        raise OSError("store unreachable")

    stale.exists = broken  # type: ignore[method-assign]
    assert _read(c, "a") == [False] and len(c) == 0


def test_clear_forgets_the_prefix_and_close_forgets_all(stale: Stale) -> None:
    c = NegativeCache(stale, 60.0, clock=Clock())
    c.remember(["p/a", "p/b", "q/a"])
    c.clear("p/")
    assert len(c) == 1 and "q/a" in c
    c.close()
    assert len(c) == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"ttl_s": 0}, "ttl_s"), ({"ttl_s": -1.0}, "ttl_s"), ({"ttl_s": 1.0, "max_entries": 0}, "max_entries")],
)
def test_bad_arguments_name_themselves(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        NegativeCache(MemoryTransport("neg-bad"), **kwargs)  # type: ignore[arg-type]
    drop_store("neg-bad")


def test_thread_safe_under_concurrent_reads_and_lookups(stale: Stale) -> None:
    c = NegativeCache(stale, 60.0, max_entries=64)
    names = [f"k{i}" for i in range(200)]
    _put(stale, *names)
    stale.stale.update(names[::2])
    errors: list[BaseException] = []

    def work(part: list[str]) -> None:
        try:
            for k in part:
                _read(c, k)
                c.exists([k])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(names[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(c) <= 64
    assert all(k not in c for k in names[1::2])  # readable objects are never remembered


def test_through_the_adapter_config() -> None:
    """``negative_cache_ttl_s`` wraps the adapter's transport outermost; a page whose read
    fails while its object stays present is a miss for the next query."""
    import torch

    from hicache_sdk.hostpool import MHAHostPool

    store = f"neg-{uuid.uuid4().hex}"
    cfg = {"store": store, "negative_cache_ttl_s": 30.0, "exists_timeout_s": 10.0, "transfer_timeout_s": 10.0}
    s = MemoryStorage(HiCacheStorageConfig(model_name="m", extra_config=cfg), {})
    off = MemoryStorage(HiCacheStorageConfig(model_name="m", extra_config={"store": store}), {})
    try:
        assert isinstance(s.transport, NegativeCache) and s.transport.ttl_s == 30.0
        assert not isinstance(off.transport, NegativeCache)
        host = MHAHostPool(64, 4, layer_num=1, head_num=1, head_dim=4, dtype=torch.float32, pin_memory=False)
        s.register_mem_pool_host(host)
        keys = [f"{i:064x}" for i in range(4)]
        idx = torch.arange(16, dtype=torch.int64)
        assert s.batch_set_v1(keys, idx) == [True] * 4
        assert s.batch_exists(keys) == 4
        # page 2's object becomes unreadable while the store keeps reporting it
        inner = s.raw_transport
        real_read = inner.read
        page2 = [n for n in inner._store.objects if keys[2] in n]  # type: ignore[attr-defined]
        assert len(page2) == 1

        def read(names: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
            return [ok and n != page2[0] for n, ok in zip(names, real_read(names, buffers))]

        inner.read = read  # type: ignore[method-assign]
        assert s.batch_get_v1(keys, idx) == [True, True, False, True]
        assert s.batch_exists(keys) == 2  # the next query stops before the unreadable page
        # answered from the cache twice: the adapter's own existence check after the failed
        # read (which would delete a wrong-sized object) and the next query
        counters = s.metrics.snapshot()["counters"]
        assert counters["negative_cache_added"] == 1 and counters["negative_cache_suppressed"] == 2
    finally:
        s.close()
        off.close()
        drop_store(store)


def test_a_cache_of_plain_misses_is_the_bug_it_must_not_be(
    stale: Stale, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broken variant of ``test_a_plain_miss_is_never_remembered``: remembering every
    failed read (no check that the store still reports the object) hides a page another
    instance writes."""

    def read(
        self: NegativeCache, keys: Sequence[str], buffers: Sequence[Segments], cancel: object = None
    ) -> list[bool]:
        res = self.inner.read(keys, buffers)
        self.remember([k for k, ok in zip(keys, res) if not ok])
        return res

    monkeypatch.setattr(NegativeCache, "read", read)
    with pytest.raises(AssertionError):
        test_a_plain_miss_is_never_remembered(stale)


class Late(Stale, DeadlineScoped):
    """A stale store under a caller's deadline: it offers ``DeadlineScoped`` and answers
    ``deadline_passed()`` as the resilience layer would, and ``exists`` is not asked (all
    absent) while it has passed."""

    def __init__(self, store: str) -> None:
        super().__init__(store)
        self.passed = False

    def deadline_scope(self, op: str) -> AbstractContextManager[None]:
        return nullcontext()

    def deadline_passed(self) -> bool:
        return self.passed

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        if self.passed:
            return [None] * len(keys)  # the call did not start
        return super().exists(keys)


def test_a_read_that_used_the_whole_deadline_is_settled_at_the_next_exists() -> None:
    """The read spent the caller's deadline, so the store cannot be asked after it: the
    failed objects are suspects until an ``exists`` that really asks the store settles them
    (present: remembered; absent: dropped, as a plain miss)."""
    name = f"neg-{uuid.uuid4().hex}"
    t = Late(name)
    try:
        c, m = NegativeCache(t, 60.0, clock=Clock()), Metrics()
        c._metrics = m
        _put(t, "a", "b")
        t.stale.update({"a", "b"})
        t.passed = True
        assert _read(c, "a", "b", "x") == [False, False, False]
        assert len(c) == 0 and m.counter("negative_cache_added") == 0
        assert c.exists(["a", "x"]) == [None, None]  # still past the deadline: nothing settled
        assert len(c) == 0
        t.passed = False
        assert c.exists(["a", "b", "x", "a"]) == [None, None, None, None]  # a and b: present but unreadable
        assert "a" in c and "b" in c and "x" not in c and len(c) == 2
        assert m.counter("negative_cache_added") == 2 and m.counter("negative_cache_suppressed") == 3
        _put(MemoryTransport(name), "x")  # x was a plain miss: dropped, so its later write is seen
        assert c.exists(["x"]) == [4]
    finally:
        drop_store(name)
