"""The three prefetch policies on a virtual clock, and quarantine of abandoned reads."""

from __future__ import annotations

from hiradix_helpers import make_engine, new_store, settle, warm

from hicache_sdk.hiradix import Abort, ReadPathConfig

TOKS = list(range(7000, 7000 + 64))


def _cfg(policy: str) -> ReadPathConfig:
    return ReadPathConfig(page_size=4, prefetch_threshold=8, load_back_threshold=1, prefetch_policy=policy)


def _started(policy: str) -> tuple[object, str]:
    store = new_store()
    warm(_cfg(policy), store, TOKS)
    e = make_engine(_cfg(policy), store)
    e.submit("r", TOKS)
    return e, store


def test_best_effort_terminates_at_first_poll() -> None:
    e, _ = _started("best_effort")
    r = e.try_admit("r")  # type: ignore[attr-defined]
    assert r is not None and r.blocked_polls == 0 and r.storage_hit == 0 and r.computed == 64
    assert e.prefetcher.tokens_occupied == 0  # type: ignore[attr-defined]
    e.s.runner.run_all()  # type: ignore[attr-defined]  # the revoked query still completes harmlessly
    e.prefetcher.drain()  # type: ignore[attr-defined]
    e.writer.drain()  # type: ignore[attr-defined]  # the backup of the computed pages is acknowledged
    assert all(n.host_lock_ref == 0 for n in e.s.tree.walk())  # type: ignore[attr-defined]


def test_best_effort_uses_what_completed() -> None:
    e, _ = _started("best_effort")
    e.s.runner.step()  # type: ignore[attr-defined]  # query
    e.prefetcher.drain()  # type: ignore[attr-defined]  # allocates, submits the read
    e.s.runner.step()  # type: ignore[attr-defined]  # read
    r = e.try_admit("r")  # type: ignore[attr-defined]
    assert r is not None and r.storage_hit == 64 and r.computed == 0 and e.verify(r.nodes)  # type: ignore[attr-defined]


def test_wait_complete_waits_without_bound() -> None:
    e, _ = _started("wait_complete")
    for _ in range(100):
        e.s.clock.advance(10.0)  # type: ignore[attr-defined]
        assert e.try_admit("r") is None  # type: ignore[attr-defined]
    r = settle(e, "r")  # type: ignore[arg-type]
    assert r.storage_hit == 64 and r.blocked_polls >= 101


def test_timeout_timer_starts_at_first_blocked_poll_and_is_exact() -> None:
    e, _ = _started("timeout")
    deadline = _cfg("timeout").timeout_for(64)
    assert deadline == 1.0 + 0.25 * 64 / 1024
    e.s.clock.advance(100.0)  # type: ignore[attr-defined]  # before the first poll: not counted
    assert e.try_admit("r") is None  # type: ignore[attr-defined]  # timer starts here
    e.s.clock.advance(deadline - 1e-6)  # type: ignore[attr-defined]
    assert e.try_admit("r") is None  # type: ignore[attr-defined]
    e.s.clock.advance(1e-6)  # type: ignore[attr-defined]
    r = e.try_admit("r")  # type: ignore[attr-defined]
    assert r is not None and r.storage_hit == 0 and r.computed == 64
    assert e.explain("r")["why_not"] == [Abort.TIMEOUT.value]  # type: ignore[attr-defined]


def test_timeout_after_kv_landed_admits_with_what_landed() -> None:
    """The deadline is a termination condition of its own (sgl-project/sglang#35181): past
    it the request is admitted although the completion ack was not drained yet, and every
    KV token that landed is used (nothing is counted unfulfilled)."""
    from hicache_sdk.metrics import lifecycle as lc

    e, _ = _started("timeout")
    assert e.try_admit("r") is None  # type: ignore[attr-defined]
    e.s.runner.step()  # type: ignore[attr-defined]  # query
    e.prefetcher.drain()  # type: ignore[attr-defined]
    op = e.prefetcher.ongoing["r"]  # type: ignore[attr-defined]
    op.completed_tokens = op.hit_tokens  # KV landed, completion ack not yet drained
    e.s.clock.advance(1000.0)  # type: ignore[attr-defined]
    r = e.try_admit("r")  # type: ignore[attr-defined]
    assert r is not None and r.storage_hit == 64 and r.computed == 0
    snap = e.s.counters.snapshot()  # type: ignore[attr-defined]
    assert snap[lc.HIT] == 64 and snap[lc.PREFETCHED] == 64
    assert sum(snap[lc.UNFULFILLED].values()) == 0
    e.s.runner.run_all()  # type: ignore[attr-defined]


def test_timeout_quarantines_slots_of_a_read_in_flight() -> None:
    e, _ = _started("timeout")
    assert e.try_admit("r") is None  # type: ignore[attr-defined]
    e.s.runner.step()  # type: ignore[attr-defined]  # query
    e.prefetcher.drain()  # type: ignore[attr-defined]  # read submitted, not run: it may still fill
    free_before = e.s.host.available_size()  # type: ignore[attr-defined]
    e.s.clock.advance(10.0)  # type: ignore[attr-defined]
    r = e.try_admit("r")  # type: ignore[attr-defined]
    assert r is not None and r.storage_hit == 0
    # the 64 read slots stay out of reuse while the read may run (only write-through copies were taken)
    op_slots = 64
    assert e.s.host.available_size() <= free_before  # type: ignore[attr-defined]
    held = e.s.host.available_size()  # type: ignore[attr-defined]
    e.s.runner.run_all()  # type: ignore[attr-defined]  # the abandoned read ends: slots come back
    e.writer.drain()  # type: ignore[attr-defined]
    assert e.s.host.available_size() == held + op_slots  # type: ignore[attr-defined]


class _Gated:
    """A real backend whose reads block until released (a stalled read on a real thread)."""

    def __init__(self, inner: object) -> None:
        import threading

        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()

    def register_mem_pool_host(self, pool: object) -> None:
        self.inner.register_mem_pool_host(pool)  # type: ignore[attr-defined]

    def batch_exists(self, keys: list[str], extra_info: object = None) -> int:
        return int(self.inner.batch_exists(keys))  # type: ignore[attr-defined]

    def batch_get_v1(self, keys: list[str], idx: object, extra_info: object = None) -> list[bool]:
        self.entered.set()
        assert self.release.wait(30)
        return list(self.inner.batch_get_v1(keys, idx))  # type: ignore[attr-defined]

    def batch_set_v1(self, keys: list[str], idx: object, extra_info: object = None) -> list[bool]:
        return list(self.inner.batch_set_v1(keys, idx))  # type: ignore[attr-defined]


def test_quarantine_on_a_real_thread_stalled_read() -> None:
    from hiradix_helpers import make_storage

    from hicache_sdk.hiradix import ThreadRunner

    store = new_store()
    warm(_cfg("timeout"), store, TOKS)
    gated = _Gated(make_storage(store))
    e = make_engine(_cfg("timeout"), storage=gated, runner=ThreadRunner())
    try:
        e.submit("r", TOKS)
        for _ in range(2000):  # poll until the read is running on the worker thread
            assert e.try_admit("r") is None
            if gated.entered.wait(0.005):
                break
        assert gated.entered.is_set()
        free = e.s.host.available_size()
        e.s.clock.advance(10.0)  # type: ignore[attr-defined]
        r = e.try_admit("r")
        assert r is not None and r.storage_hit == 0 and r.computed == 64
        assert e.explain("r")["why_not"] == ["timeout"]
        # the 64 slots the stalled read may still fill are not reusable
        assert e.s.host.available_size() <= free
        grab = e.s.alloc_host(e.s.host.available_size())
        assert grab is not None and e.s.alloc_host(4) is None
        gated.release.set()
    finally:
        gated.release.set()
        e.s.close()  # joins the worker: the read has ended
    assert e.s.alloc_host(64) is not None  # ...and only now its slots come back
