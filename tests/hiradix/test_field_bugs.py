"""What SGLang's operators hit, as read-path tests: each cites its upstream issue or pull
request, and each has a deliberately broken variant (the bug, put back) that fails it.

Pattern: ``_check_*`` holds a scenario and its assertions; ``test_*`` runs it on our read
path, ``test_*_broken`` runs it with the bug patched back in and expects an
``AssertionError`` from the same assertions. The DP-attention ranks tests (#7158) are in
``test_field_bugs_ranks.py``."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from hiradix_helpers import (
    Flaky,
    make_engine,
    make_stale_storage,
    make_storage,
    new_store,
    settle,
    warm,
)

import hicache_sdk.hiradix.prefetch as prefetch_mod
import hicache_sdk.hiradix.prefetch_io as prefetch_io_mod
from hicache_sdk.hiradix import (
    Engine,
    MonotonicClock,
    ReadPathConfig,
    ThreadRunner,
    VirtualClock,
    page_kv,
)
from hicache_sdk.hiradix.backup import WritePath
from hicache_sdk.hiradix.prefetch import Prefetcher
from hicache_sdk.metrics import lifecycle as lc

PS = 4
TOKS = list(range(11000, 11000 + 64))  # 16 pages


def _cfg(policy: str = "wait_complete", **kw: Any) -> ReadPathConfig:
    return ReadPathConfig(
        page_size=PS, prefetch_threshold=8, load_back_threshold=1, prefetch_policy=policy, **kw
    )


def _broken(check: Callable[[], None]) -> None:
    with pytest.raises(AssertionError):
        check()


# -- sgl-project/sglang#31315: stale "exists" hits whose gets time out -----------------------


def _ignore_deadline_while_a_read_is_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug: the gate waits for a read in flight before it honours the deadline."""
    real = Prefetcher.check_prefetch_progress

    def gate(self: Prefetcher, req_id: str, queue_head: bool = True) -> bool:
        self.drain()
        op = self.ongoing.get(req_id)
        if op is not None and op.host_indices is not None and not op.io_done:
            return False
        return real(self, req_id, queue_head)

    monkeypatch.setattr(Prefetcher, "check_prefetch_progress", gate)


def _check_queue_head_bound() -> None:
    """PR #31315 (https://github.com/sgl-project/sglang/pull/31315): ``batch_exists`` says
    yes while ``batch_get`` takes 5 s and misses. The queue head is never held longer than
    the ``timeout`` policy's bound + 50 ms (virtual clock, 10 ms a scheduling pass), and no
    admission poll waits on the backend (each returns in well under the 5 s stall)."""
    store = new_store()
    warm(_cfg(), store, TOKS)
    storage = make_stale_storage(store)
    cfg = _cfg("timeout")
    e = make_engine(cfg, storage=storage, runner=ThreadRunner(), clock=VirtualClock())
    stale = storage.raw_transport
    stale.make_stale(e.s.tree.hashes(TOKS, None)[3])
    bound = cfg.timeout_for(len(TOKS))
    try:
        e.submit("head", TOKS)
        slowest = 0.0

        def poll() -> Any:
            nonlocal slowest
            t0 = time.monotonic()
            r = e.try_admit("head")
            slowest = max(slowest, time.monotonic() - t0)
            return r

        assert poll() is None  # the timer starts at virtual 0
        for _ in range(20000):  # real time until the stale read is running on the worker
            if stale.stale_reads:
                break
            assert poll() is None
            time.sleep(0.0005)
        assert stale.stale_reads, "the stale read never started"
        served = None
        while served is None and e.s.clock.now() <= bound + 1.0:
            e.s.clock.advance(0.01)  # type: ignore[attr-defined]
            served = poll()
        assert served is not None, "the queue head was still held 1 s past the bound"
        assert served.waited_s <= bound + 0.05, (served.waited_s, bound)
        assert served.storage_hit == 0 and served.computed == len(TOKS)
        assert slowest < 1.0, f"an admission poll took {slowest:.2f} s: it waited on the backend"
        assert e.explain("head")["unfulfilled_tokens"] == {"deadline": len(TOKS)}
    finally:
        stale.release.set()
        e.s.close()
        storage.close()


def test_31315_queue_head_bound() -> None:
    _check_queue_head_bound()


def test_31315_queue_head_bound_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    _ignore_deadline_while_a_read_is_pending(monkeypatch)
    _broken(_check_queue_head_bound)


def _serve_cold(storage: Any, rid: str, tokens: list[int]) -> Any:
    """One request on a fresh (cold) engine sharing ``storage``: real clock and threads."""
    cfg = _cfg("timeout", write_policy="write_back")  # nothing is written back: reads only
    e = make_engine(cfg, storage=storage, runner=ThreadRunner(), clock=MonotonicClock())
    try:
        return e.serve(rid, tokens)
    finally:
        e.s.close()


def _check_negative_cache(ttl_s: float, requests: int = 100, cache: bool = True) -> list[float]:
    """PR #31315: with the kit's negative cache (``negative_cache_ttl_s``), 100 requests
    over a stale page time out at most once per key per TTL: consecutive timed-out gets of
    the key start at least a TTL apart. The backend's transfer deadline (0.2 s) abandons
    the stale read. Returns the start times of the timed-out gets. ``cache=False`` is the
    broken variant (the bug: no negative cache)."""
    store = new_store()
    warm(_cfg(), store, TOKS)
    extra: dict[str, float] = {"transfer_timeout_s": 0.2}
    if cache:
        extra["negative_cache_ttl_s"] = ttl_s
    storage = make_stale_storage(store, **extra)
    stale = storage.raw_transport
    stale.make_stale(_hashes(TOKS)[3])
    try:
        t0 = time.monotonic()
        for i in range(requests):
            r = _serve_cold(storage, f"r{i}", TOKS)
            assert r.computed == len(TOKS)
        span = time.monotonic() - t0
        starts = list(stale.stale_reads)
        assert starts, "the stale page was never read"
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert all(g >= ttl_s for g in gaps), (ttl_s, gaps)
        # at most one timed-out get per key per TTL over the whole run
        assert len(starts) <= 1 + int(span / ttl_s), (len(starts), span, ttl_s)
        return starts
    finally:
        stale.release.set()
        storage.close()


def _hashes(tokens: list[int]) -> list[str]:
    from hicache_sdk.hiradix import RadixTree

    return RadixTree(PS).hashes(tokens, None)


def test_31315_negative_cache_one_timeout_per_ttl() -> None:
    assert len(_check_negative_cache(ttl_s=60.0)) == 1


def test_31315_negative_cache_expires_after_its_ttl() -> None:
    starts = _check_negative_cache(ttl_s=0.3, requests=60)
    assert len(starts) >= 1


def test_31315_negative_cache_broken() -> None:
    """Without the cache (the bug), every request that finds the breaker closed reads the
    stale page again and waits for the transfer deadline."""
    _broken(lambda: _check_negative_cache(ttl_s=60.0, requests=20, cache=False) and None)


# -- sgl-project/sglang#40193: a complete L3 hit silently cut to the free host pool ---------

N_40193, FREE_40193 = 16010, 2551


@pytest.fixture(scope="module")
def store_40193() -> Iterator[tuple[str, list[int]]]:
    """16,010 pages (page size 1, as in the report) written straight into a store."""
    from hiradix_helpers import GEOM

    from hicache_sdk.hostpool import MHAHostPool
    from hicache_sdk.memory import drop_store

    store = new_store()
    toks = [(7 * i + 3) % 32000 for i in range(N_40193)]
    st = make_storage(store)
    host = MHAHostPool(N_40193 + 8, 1, dtype=torch.float32, pin_memory=False, **GEOM)  # type: ignore[arg-type]
    st.register_mem_pool_host(host)
    hashes = _hashes_ps1(toks)
    shape = (2, 1, GEOM["layer_num"], GEOM["head_num"], GEOM["head_dim"])
    for i, h in enumerate(hashes):
        host.kv_buffer[:, i : i + 1] = page_kv(h, shape, torch.float32)
    for c in range(0, N_40193, 128):
        assert all(st.batch_set_v1(hashes[c : c + 128], torch.arange(c, min(N_40193, c + 128))))
    assert st.batch_exists(hashes) == N_40193
    st.close()
    yield store, toks
    drop_store(store)


def _hashes_ps1(tokens: list[int]) -> list[str]:
    from hicache_sdk.hiradix import RadixTree

    return RadixTree(1).hashes(tokens, None)


def _engine_with_free_host(store: str, free: int) -> Engine:
    cfg = ReadPathConfig(page_size=1, load_back_threshold=1, prefetch_policy="wait_complete")
    e = make_engine(cfg, store, host_tokens=4096, dev_tokens=N_40193 + 64)
    pinned = e.s.alloc_host(e.s.host.available_size() - free)  # the rest of L2 is in use
    assert pinned is not None and e.s.host.available_size() == free
    return e


def _check_40193_cut(store: str, toks: list[int]) -> None:
    """#40193 (https://github.com/sgl-project/sglang/pull/40193): a complete L3 hit of
    16,010 pages meets 2,551 free host tokens. 0.5.23 stages the part that fits; ``explain``
    reports the cut with both numbers and the reason, and the cut counts as unfulfilled
    ``host_capacity`` (SGLang's counting)."""
    e = _engine_with_free_host(store, FREE_40193)
    e.submit("r", toks)
    r = settle(e, "r")
    assert r.storage_hit == FREE_40193 and e.verify(r.nodes[:FREE_40193])
    ex = e.explain("r")
    assert ex["storage_hit_tokens"] == N_40193
    cut = [ev for ev in ex["events"] if ev["metric"] == "unfulfilled"]  # type: ignore[union-attr]
    assert cut == [
        {
            "metric": "unfulfilled",
            "reason": "host_capacity",
            "tokens": N_40193 - FREE_40193,
            "cause": "host_pool_short",
            "hit_tokens": N_40193,
            "kept_tokens": FREE_40193,
        }
    ]
    assert ex["unfulfilled_tokens"] == {"host_capacity": N_40193 - FREE_40193} and ex["deferred_tokens"] == {}
    snap = e.s.counters.snapshot()
    assert snap[lc.HIT] == N_40193 and snap[lc.PREFETCHED] == FREE_40193
    assert snap[lc.UNFULFILLED]["host_capacity"] == N_40193 - FREE_40193


def _check_40193_wait(store: str, toks: list[int]) -> None:
    """#40193: when not even the threshold fits (200 free tokens), the hit waits for a
    retry: all of it is unfulfilled now *and* deferred (``host_capacity``), as SGLang counts."""
    e = _engine_with_free_host(store, 200)
    e.submit("r", toks)
    e.s.runner.run_all()  # type: ignore[attr-defined]  # the hit query
    e.prefetcher.drain()
    ex = e.explain("r")
    assert ex["unfulfilled_tokens"] == {"host_capacity": N_40193}
    assert ex["deferred_tokens"] == {"host_capacity": N_40193}
    assert ex["why_not"] == ["host_pool_full"] and e.prefetcher.retries.pending("r")
    e.cancel("r")


def _silent_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug: the cut (and the wait) happen without a word."""
    from hicache_sdk.hiradix.counters import Counters

    monkeypatch.setattr(Counters, "resolve", lambda self, *a, **k: None)
    monkeypatch.setattr(Counters, "defer", lambda self, *a, **k: None)
    monkeypatch.setattr(Counters, "finish", lambda self, *a, **k: None)


def test_40193_cut_is_reported(store_40193: tuple[str, list[int]]) -> None:
    _check_40193_cut(*store_40193)


def test_40193_wait_is_deferred(store_40193: tuple[str, list[int]]) -> None:
    _check_40193_wait(*store_40193)


def test_40193_broken(store_40193: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    _silent_cut(monkeypatch)
    _broken(lambda: _check_40193_cut(*store_40193))
    _broken(lambda: _check_40193_wait(*store_40193))


# -- sgl-project/sglang#31108, kvcache-ai/Mooncake#2236: a sidecar shorter than the KV -------

TOKS12 = list(range(21000, 21000 + 48))  # 12 pages


def _indexer_objects(storage: Any, hashes: list[str], pages: range) -> list[str]:
    names = [n for n in list(storage.raw_transport._store.objects) if "indexer" in n]
    return [n for n in names if any(hashes[p] in n for p in pages)]


def _check_31108() -> None:
    """#31108 (https://github.com/sgl-project/sglang/issues/31108) and Mooncake#2236
    (https://github.com/kvcache-ai/Mooncake/issues/2236): a sidecar pool loaded shorter
    than the KV, or an indexer buffer never persisted, garbled the output. The committed hit
    is the minimum of the KV and sidecar runs, and no page past it is used:

    * the store holds the indexer for pages 0..4 only (``batch_exists_v2``): hit 5 pages;
    * the indexer is stored whole but its read returns 5 pages (``batch_get_v2``): 5;
    * the indexer was never persisted: hit 0, everything recomputed."""
    # (1) the query: indexer objects of pages 5..11 missing
    store = new_store()
    warm(_cfg(), store, TOKS12, sidecars=("indexer",))
    storage = make_storage(store)
    hashes = _hashes(TOKS12)
    gone = _indexer_objects(storage, hashes, range(5, 12))
    assert len(gone) == 7
    storage.raw_transport.delete(gone)
    e = make_engine(_cfg(), storage=storage, sidecars=("indexer",))
    e.submit("r", TOKS12)
    r = settle(e, "r")
    assert e.explain("r")["in_l3"]["tokens"] == 5 * PS  # type: ignore[index]
    assert r.storage_hit == 5 * PS and r.computed == 7 * PS
    assert e.verify(r.nodes) and e.verify_sidecars()
    # (2) the transfer: the indexer read comes back 5 pages long
    store2 = new_store()
    warm(_cfg(), store2, TOKS12, sidecars=("indexer",))
    flaky = Flaky(make_storage(store2))
    flaky.short_derived_get = 5
    e2 = make_engine(_cfg(), storage=flaky, sidecars=("indexer",))
    e2.submit("r", TOKS12)
    r2 = settle(e2, "r")
    assert r2.storage_hit == 5 * PS and r2.computed == 7 * PS
    assert e2.verify(r2.nodes) and e2.verify_sidecars()
    assert e2.explain("r")["unfulfilled_tokens"] == {"storage_transfer": 7 * PS}
    # (3) never persisted: a pure-KV writer stored the KV only
    store3 = new_store()
    warm(_cfg(), store3, TOKS12)
    e3 = make_engine(_cfg(), store3, sidecars=("indexer",))
    e3.submit("r", TOKS12)
    r3 = settle(e3, "r")
    assert r3.storage_hit == 0 and r3.computed == 12 * PS
    assert e3.verify(r3.nodes) and e3.verify_sidecars()


def test_31108_sidecar_shorter_than_kv() -> None:
    _check_31108()


def test_31108_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug: the hit query and the transfer look at the KV run only."""
    real = prefetch_mod.exists_transfers
    monkeypatch.setattr(
        prefetch_mod,
        "exists_transfers",
        lambda sc, n, root: [t for t in real(sc, n, root) if t.keys is not None],
    )
    monkeypatch.setattr(prefetch_io_mod, "count_pool_hits", lambda res: {k: len(v) for k, v in res.items()})
    _broken(_check_31108)


# -- sgl-project/sglang#35181: the timeout ignored while a sidecar transfer is pending -------


class SlowSidecar(Flaky):
    """A real backend whose trailing-pool (Mamba) reads block until released."""

    def __init__(self, inner: Any) -> None:
        import threading

        super().__init__(inner)
        self.entered = threading.Event()
        self.release = threading.Event()

    def batch_get_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[str, list[bool]]:
        if not any(t.indices_from_pool is not None for t in transfers):
            self.entered.set()
            self.release.wait(30)
        return super().batch_get_v2(transfers)


def _old_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug (0.5.23): once the KV landed the deadline is ignored while sidecars read."""
    real = Prefetcher.check_prefetch_progress

    def gate(self: Prefetcher, req_id: str, queue_head: bool = True) -> bool:
        self.drain()
        op = self.ongoing.get(req_id)
        landed = (
            op is not None and op.host_indices is not None and op.completed_tokens >= (op.hit_tokens or 0)
        )
        if op is not None and not op.io_done and landed:
            return False
        return real(self, req_id, queue_head)

    monkeypatch.setattr(Prefetcher, "check_prefetch_progress", gate)


def _check_35181() -> None:
    """#35181 (https://github.com/sgl-project/sglang/pull/35181): with the ``timeout``
    policy, a sidecar (Mamba) read still pending after the KV landed does not suspend the
    deadline: the request is admitted at the bound; the hybrid prefetch is discarded whole
    (unfulfilled ``deadline``); the sidecar staging stays quarantined until the read ends."""
    store = new_store()
    warm(_cfg(), store, TOKS12, sidecars=("mamba",))
    slow = SlowSidecar(make_storage(store))
    cfg = _cfg("timeout")
    e = make_engine(cfg, storage=slow, sidecars=("mamba",), runner=ThreadRunner(), clock=VirtualClock())
    pool = e.s.sidecars[0].pool
    side_free = pool.available_size()
    bound = cfg.timeout_for(len(TOKS12))
    try:
        e.submit("r", TOKS12)
        assert e.try_admit("r") is None  # timer starts at virtual 0
        for _ in range(20000):
            if slow.entered.is_set():
                break
            assert e.try_admit("r") is None
            time.sleep(0.0005)
        assert slow.entered.is_set()
        op = e.prefetcher.ongoing["r"]
        assert op.completed_tokens == op.hit_tokens == len(TOKS12)  # the KV has landed
        e.s.clock.advance(bound - 0.001)  # type: ignore[attr-defined]
        assert e.try_admit("r") is None
        e.s.clock.advance(0.001)  # type: ignore[attr-defined]
        r = e.try_admit("r")
        assert r is not None, "the deadline did not hold while the sidecar read was pending"
        assert r.storage_hit == 0 and r.computed == len(TOKS12)
        ex = e.explain("r")
        assert ex["why_not"] == ["timeout", "hybrid_incomplete"]
        assert ex["unfulfilled_tokens"] == {"deadline": len(TOKS12)}
        held = sum(len(n.side["mamba"]) for n in e.s.tree.walk() if "mamba" in n.side)
        assert pool.available_size() == side_free - held - 1  # + the quarantined Mamba staging slot
        slow.release.set()
        assert e.s.drain_io(10.0)
        e.s.runner.close()
        e.writer.drain()
        held = sum(len(n.side["mamba"]) for n in e.s.tree.walk() if "mamba" in n.side)
        assert pool.available_size() == side_free - held
    finally:
        slow.release.set()
        e.s.close()


def test_35181_deadline_holds_with_a_pending_sidecar() -> None:
    _check_35181()


def test_35181_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    _old_gate(monkeypatch)
    _broken(_check_35181)


# -- sgl-project/sglang#12092: written but never read back: which of the three ---------------


def _started(cfg: ReadPathConfig, tokens: list[int]) -> Engine:
    store = new_store()
    warm(_cfg(), store, tokens)
    e = make_engine(cfg, store)
    e.submit("r", tokens)
    return e


def _check_12092_best_effort() -> None:
    """#12092 (https://github.com/sgl-project/sglang/issues/12092), cause 1: ``best_effort``
    stops the prefetch at the first admission poll, before the read ran."""
    e = _started(_cfg("best_effort"), TOKS)
    e.s.runner.step()  # type: ignore[attr-defined]  # the hit query
    r = e.try_admit("r")  # drains the hit, submits the read, and stops it
    assert r is not None and r.storage_hit == 0 and r.computed == len(TOKS)
    ex = e.explain("r")
    assert ex["in_l3"]["tokens"] == len(TOKS)  # type: ignore[index]
    assert ex["why_not"] == ["best_effort"]
    assert [(ev["reason"], ev["cause"], ev["tokens"]) for ev in ex["events"]] == [  # type: ignore[union-attr]
        ("storage_transfer", "best_effort", len(TOKS))
    ]
    e.s.runner.run_all()  # type: ignore[attr-defined]


def _check_12092_timeout() -> None:
    """#12092, cause 2: a ``timeout`` too short for the read."""
    e = _started(_cfg("timeout", prefetch_timeout_base=0.01, prefetch_timeout_per_ki_token=0.0), TOKS)
    assert e.try_admit("r") is None
    e.s.runner.step()  # type: ignore[attr-defined]  # the hit query
    assert e.try_admit("r") is None  # drains the hit, submits the read
    e.s.clock.advance(0.01)  # type: ignore[attr-defined]
    r = e.try_admit("r")
    assert r is not None and r.storage_hit == 0
    ex = e.explain("r")
    assert ex["why_not"] == ["timeout"]
    assert [(ev["reason"], ev["cause"], ev["tokens"]) for ev in ex["events"]] == [  # type: ignore[union-attr]
        ("deadline", "timeout", len(TOKS))
    ]
    e.s.runner.run_all()  # type: ignore[attr-defined]


def _check_12092_threshold() -> None:
    """#12092, cause 3: a prompt under the 256-token threshold: L3 is never queried."""
    cfg = ReadPathConfig(page_size=16, prefetch_policy="wait_complete")  # threshold 256
    toks = list(range(31000, 31000 + 240))
    store = new_store()
    warm(cfg, store, toks)
    flaky = Flaky(make_storage(store))
    queries = []
    real = flaky.batch_exists
    flaky.batch_exists = lambda keys, extra_info=None: queries.append(keys) or real(keys)  # type: ignore[method-assign]
    e = make_engine(cfg, storage=flaky)
    e.submit("r", toks)
    r = settle(e, "r")
    assert r.storage_hit == 0 and r.computed == 240 and not queries
    ex = e.explain("r")
    assert ex["why_not"] == ["below_threshold"]
    assert ex["declined_tokens"] == {"too_short": 240}
    assert e.s.counters.snapshot()[lc.DECLINED]["too_short"] == 240


def test_12092_best_effort() -> None:
    _check_12092_best_effort()


def test_12092_short_timeout() -> None:
    _check_12092_timeout()


def test_12092_below_threshold() -> None:
    _check_12092_threshold()


def test_12092_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug: ``explain`` cannot tell the causes apart (the policy that stopped the
    read is forgotten; the declined prefetch leaves no trace)."""
    from hicache_sdk.hiradix.counters import Counters

    real = Prefetcher._terminate
    monkeypatch.setattr(
        Prefetcher, "_terminate", lambda self, op, cause: real(self, op, prefetch_mod.Abort.READ_FAILED)
    )
    monkeypatch.setattr(Counters, "decline", lambda self, *a, **k: None)
    _broken(_check_12092_best_effort)
    _broken(_check_12092_timeout)
    _broken(_check_12092_threshold)


# -- sgl-project/sglang#39444: write_through, a first-seen prefix evicted before its backup --

P1 = list(range(41000, 41000 + 64))
P2 = list(range(42000, 42000 + 64))


def _check_39444_eviction(store: str) -> None:
    """#39444 (https://github.com/sgl-project/sglang/issues/39444): under
    ``write_through``, a first-seen prefix is evicted (device, then host pressure) before its
    L3 backup ran. The backup completes, byte for byte (the host slots it reads stay locked),
    and what could not be backed up is counted dropped with its reason; a cold reader never
    gets a hit that is not the prefix's own bytes."""
    cfg = _cfg("best_effort", write_policy="write_through")  # admitted at once: no job runs
    e = make_engine(cfg, store, host_tokens=64, dev_tokens=64)
    e.submit("p1", P1)
    assert e.try_admit("p1") is not None  # P1 computed, copied to host, its L3 backup queued
    e.submit("p2", P2)
    assert e.try_admit("p2") is not None  # evicts P1 from the device; host pressure
    assert not any(n.on_device for n in e.s.tree.walk() if n.tokens[0] in P1)
    assert e.writer.ongoing >= 1  # P1's backup has not run yet
    e.s.runner.run_all()  # type: ignore[attr-defined]  # the backups run now
    e.writer.drain()
    cold = make_engine(_cfg(), store)
    for rid, toks in (("c1", P1), ("c2", P2)):
        cold.submit(rid, toks)
        r = settle(cold, rid)
        assert cold.verify(r.nodes), f"{rid}: an L3 hit with foreign bytes"
    assert cold.explain("c1")["in_l3"]["tokens"] == len(P1)  # type: ignore[index]
    snap = e.s.counters.snapshot()
    # every backup token is accounted for: completed or dropped with a reason
    assert snap[lc.BACKUPED] + snap[lc.BACKUP_DROPPED] == len(P1) + len(P2)
    assert snap[lc.BACKUP_DROPPED] == snap[lc.BACKUP_DROPPED_BY_REASON]["host_capacity"] > 0
    assert cold.explain("c2")["in_l3"]["tokens"] == snap[lc.BACKUPED] - len(P1)  # type: ignore[index]


class FailSecondChunk(Flaky):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.sets = 0

    def batch_set_v1(self, keys: list[str], idx: torch.Tensor, extra_info: Any = None) -> list[bool]:
        self.sets += 1
        if self.sets == 2:
            raise OSError("injected failure of the second chunk")
        return super().batch_set_v1(keys, idx)


def _check_39444_partial() -> None:
    """#39444: a backup whose second 128-page chunk fails: the first 128 pages are backed up
    and marked so, the other 72 are counted dropped (``storage_transfer``), and a cold
    reader's hit is exactly the 128 stored pages, never more."""
    store = new_store()
    toks = list(range(50000, 50000 + 200 * PS))
    storage = FailSecondChunk(make_storage(store))
    cfg = _cfg(write_policy="write_through")
    e = make_engine(cfg, storage=storage, host_tokens=2048, dev_tokens=2048)
    e.submit("w", toks)
    r = settle(e, "w")
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.writer.drain()
    snap = e.s.counters.snapshot()
    assert snap[lc.BACKUPED] == 128 * PS and snap[lc.BACKUP_DROPPED] == 72 * PS
    assert snap[lc.BACKUP_DROPPED_BY_REASON]["storage_transfer"] == 72 * PS
    assert [n.backed_up_storage for n in r.nodes] == [True] * 128 + [False] * 72
    cold = make_engine(cfg, store, host_tokens=2048, dev_tokens=2048)
    cold.submit("c", toks)
    c = settle(cold, "c")
    assert c.storage_hit == 128 * PS and cold.verify(c.nodes)


def _no_backup_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug: the backup does not pin the host slots it reads."""
    from hicache_sdk.hiradix.tree import RadixTree

    real_backup = WritePath._backup

    def backup(self: WritePath, nodes: list[Any]) -> None:
        tree = self.s.tree
        monkeypatch.setattr(tree, "inc_host_lock_ref", lambda node: None)
        try:
            real_backup(self, nodes)
        finally:
            monkeypatch.setattr(tree, "inc_host_lock_ref", RadixTree.inc_host_lock_ref)

    real_drain = WritePath.drain

    def drain(self: WritePath) -> int:
        tree = self.s.tree
        monkeypatch.setattr(tree, "dec_host_lock_ref", lambda node: None)
        try:
            return real_drain(self)
        finally:
            monkeypatch.setattr(tree, "dec_host_lock_ref", RadixTree.dec_host_lock_ref)

    monkeypatch.setattr(WritePath, "_backup", backup)
    monkeypatch.setattr(WritePath, "drain", drain)


def _partial_counted_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug: a partial backup is acknowledged as a whole one."""
    real = WritePath._write

    def write(self: WritePath, op: Any) -> None:
        real(self, op)
        op.completed_pages = len(op.nodes)

    monkeypatch.setattr(WritePath, "_write", write)


def test_39444_backup_completes_under_eviction() -> None:
    _check_39444_eviction(new_store())


def test_39444_partial_backup_is_counted() -> None:
    _check_39444_partial()


def test_39444_broken_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_backup_lock(monkeypatch)
    _broken(lambda: _check_39444_eviction(new_store()))


def test_39444_broken_partial(monkeypatch: pytest.MonkeyPatch) -> None:
    _partial_counted_whole(monkeypatch)
    _broken(_check_39444_partial)
