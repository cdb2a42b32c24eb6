"""The real-time option: backend calls bounded by ``io_timeout_s`` on the resilience layer's
deadline runner. A call past the deadline is abandoned (a miss) but still runs; the host slots
it may still touch stay out of reuse until it really ends (reads: quarantine; writes: the
backup's host lock is kept)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hiradix_helpers import make_engine, make_storage, new_store, warm

from hicache_sdk.hiradix import CallAbandoned, MonotonicClock, ReadPathConfig, ThreadRunner

PS = 4
TOKS = list(range(7000, 7000 + 64))


class Gated:
    """A real backend whose reads (``gate_get``) or writes (``gate_set``) block until released."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate_get = self.gate_set = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.ended = threading.Event()

    def register_mem_pool_host(self, pool: Any) -> None:
        self.inner.register_mem_pool_host(pool)

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        return int(self.inner.batch_exists(keys))

    def _gate(self) -> None:
        self.entered.set()
        assert self.release.wait(30)

    def batch_get_v1(self, keys: list[str], idx: Any, extra_info: Any = None) -> list[bool]:
        if self.gate_get:
            self._gate()
        try:
            return list(self.inner.batch_get_v1(keys, idx))
        finally:
            self.ended.set()

    def batch_set_v1(self, keys: list[str], idx: Any, extra_info: Any = None) -> list[bool]:
        if self.gate_set:
            self._gate()
        return list(self.inner.batch_set_v1(keys, idx))


def _cfg(**kw: Any) -> ReadPathConfig:
    kw.setdefault("io_timeout_s", 0.05)
    return ReadPathConfig(
        page_size=PS, prefetch_threshold=8, load_back_threshold=1, prefetch_policy="wait_complete", **kw
    )


def _engine(cfg: ReadPathConfig, storage: Any) -> Any:
    return make_engine(cfg, storage=storage, runner=ThreadRunner(), clock=MonotonicClock())


def _admit(e: Any, rid: str) -> Any:
    for _ in range(4000):
        r = e.try_admit(rid)
        if r is not None:
            return r
        threading.Event().wait(0.001)
    raise AssertionError("not admitted")


def test_abandoned_read_keeps_its_slots_until_it_ends() -> None:
    store = new_store()
    warm(_cfg(io_timeout_s=None), store, TOKS)
    gated = Gated(make_storage(store))
    gated.gate_get = True
    e = _engine(_cfg(), gated)
    try:
        free = e.s.host.available_size()
        e.submit("r", TOKS)
        r = _admit(e, "r")  # wait_complete, yet bounded: the read was abandoned at 0.05 s
        assert gated.entered.is_set() and not gated.ended.is_set()
        assert r.storage_hit == 0 and r.computed == 64
        assert len(e.prefetcher.quarantine_ops) == 1
        (op,) = e.prefetcher.quarantine_ops
        assert op.io_refs == 1 and sum(len(t) for _, t in op.quarantined) == 64
        held_by_tree = sum(len(n.host_value) for n in e.s.tree.walk() if n.host_value is not None)
        assert e.s.host.available_size() == free - held_by_tree - 64  # the read's 64 slots stay out
        gated.release.set()
        assert e.s.drain_io(10.0) and gated.ended.is_set()
        assert not e.prefetcher.quarantine_ops
        e.s.runner.close()  # joins the worker (the write-through backup has run)
        e.writer.drain()
        held_by_tree = sum(len(n.host_value) for n in e.s.tree.walk() if n.host_value is not None)
        assert e.s.host.available_size() == free - held_by_tree
    finally:
        gated.release.set()
        e.s.close()


def test_abandoned_write_keeps_the_backup_host_lock_until_it_ends() -> None:
    gated = Gated(make_storage(new_store()))
    gated.gate_set = True
    e = _engine(_cfg(), gated)
    try:
        e.submit("w", TOKS)
        r = _admit(e, "w")
        assert gated.entered.wait(10)  # the backup's write is running ...
        for _ in range(200):  # ... and is abandoned: its (failed) ack arrives
            e.writer.drain()
            if e.writer.failed_backups:
                break
            threading.Event().wait(0.01)
        assert e.writer.failed_backups == 1 and e.writer.ongoing == 1
        assert r.nodes[-1].host_lock_ref == 1  # the slots it reads from cannot be evicted yet
        gated.release.set()
        assert e.s.drain_io(10.0)
        e.writer.drain()
        assert e.writer.ongoing == 0 and all(n.host_lock_ref == 0 for n in e.s.tree.walk())
    finally:
        gated.release.set()
        e.s.close()


def test_bounded_call_raises_call_abandoned_and_passes_errors_through() -> None:
    e = _engine(_cfg(), None)
    try:
        ev = threading.Event()
        with pytest.raises(CallAbandoned):
            e.s.bounded(lambda: ev.wait(5))
        ev.set()
        with pytest.raises(OSError, match="boom"):
            e.s.bounded(lambda: (_ for _ in ()).throw(OSError("boom")))
        assert e.s.bounded(lambda: 7) == 7
    finally:
        e.s.close()


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_io_timeout_must_be_positive(bad: float) -> None:
    with pytest.raises(ValueError, match="io_timeout_s"):
        _cfg(io_timeout_s=bad)
