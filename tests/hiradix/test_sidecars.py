"""Hybrid pools on the read path (spec 2.1-2.4): trailing pools (Mamba, SWA) through
``batch_exists_v2`` / ``batch_get_v2`` with all-or-nothing acceptance, KV-derived pools
(indexer) clamped per chunk, and the sparse restorable endpoints of a Mamba stack."""

from __future__ import annotations

import pytest
from hiradix_helpers import SWA_WINDOW, Flaky, make_engine, make_storage, new_store, settle, warm

from hicache_sdk.hiradix import Abort, ReadPathConfig, Sidecar
from hicache_sdk.metrics import lifecycle as lc
from hicache_sdk.spec import PoolHitPolicy

PS = 4
TOKS = list(range(9000, 9000 + 48))  # 12 pages


def _cfg(policy: str = "wait_complete", **kw: object) -> ReadPathConfig:
    return ReadPathConfig(
        page_size=PS,
        prefetch_threshold=8,
        load_back_threshold=1,
        prefetch_policy=policy,
        **kw,  # type: ignore[arg-type]
    )


ALL = ("mamba", "swa", "indexer")


def test_hybrid_round_trip_commits_kv_and_sidecar_states() -> None:
    store = new_store()
    warm(_cfg(), store, TOKS, sidecars=ALL)
    e = make_engine(_cfg(), store, sidecars=ALL)
    e.submit("r", TOKS)
    r = settle(e, "r")
    assert r.storage_hit == 48 and r.computed == 0 and e.verify(r.nodes)
    nodes = r.nodes
    assert "mamba" in nodes[-1].side and all("mamba" not in n.side for n in nodes[:-1])
    assert [("swa" in n.side) for n in nodes[-SWA_WINDOW - 1 :]] == [False] + [True] * SWA_WINDOW
    assert e.verify_sidecars()  # indexer pages at the KV slots, trailing states at their own
    assert e.s.counters.causes()[Abort.SIDECAR_MISS.value] == 0


def test_sidecar_miss_discards_the_whole_prefetch() -> None:
    store = new_store()
    warm(_cfg(), store, TOKS, sidecars=("mamba",))
    flaky = Flaky(make_storage(store))
    e = make_engine(_cfg(), storage=flaky, sidecars=("mamba",))
    host_free, side_free = e.s.host.available_size(), e.s.sidecars[0].pool.available_size()
    flaky.fail_side_get = 1  # KV reads succeed, the Mamba state read misses
    e.submit("r", TOKS)
    e.s.runner.run_all()  # type: ignore[attr-defined]  # query
    e.prefetcher.drain()
    op = e.prefetcher.ongoing["r"]
    assert op.hit_tokens == 48 and e.s.host.available_size() == host_free - 48
    e.s.runner.run_all()  # type: ignore[attr-defined]  # KV chunks land, then the sidecar misses
    assert op.completed_tokens == 48
    r = e.try_admit("r")
    assert r is not None and r.storage_hit == 0 and r.computed == 48  # nothing committed from L3
    assert e.explain("r")["why_not"] == [Abort.SIDECAR_MISS.value]
    assert e.explain("r")["in_l3"]["answer"] is True  # type: ignore[index]
    assert e.explain("r")["filled_into_host"]["answer"] is False  # type: ignore[index]
    # every staged KV and sidecar slot came back (the computed pages' write-through took its own)
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.writer.drain()
    kv_held = sum(len(n.host_value) for n in e.s.tree.walk() if n.host_value is not None)
    side_held = sum(len(n.side["mamba"]) for n in e.s.tree.walk() if "mamba" in n.side)
    assert e.s.host.available_size() == host_free - kv_held
    assert e.s.sidecars[0].pool.available_size() == side_free - side_held


def test_kv_derived_sidecar_clamps_the_chunk_hit() -> None:
    store = new_store()
    warm(_cfg(), store, TOKS, sidecars=("indexer",))
    flaky = Flaky(make_storage(store))
    flaky.short_derived_get = 5  # indexer pages 0..4 read, page 5 fails: a usable 5-page prefix
    e = make_engine(_cfg(), storage=flaky, sidecars=("indexer",))
    e.submit("r", TOKS)
    r = settle(e, "r")
    assert r.storage_hit == 5 * PS and r.computed == 48 - 5 * PS  # clamped, not discarded
    assert e.s.counters.causes()[Abort.SIDECAR_MISS.value] == 0
    assert e.verify(r.nodes) and e.verify_sidecars()


def test_restorable_endpoints_are_sparse_with_mamba() -> None:
    """KV stored for 12 pages, Mamba state only at the end of an 8-page request: the hit is
    the restorable endpoint 8, not the KV prefix 12 (whose state read would miss)."""
    store = new_store()
    warm(_cfg(), store, TOKS[: 8 * PS], sidecars=("mamba",))  # KV 1..8 + mamba at page 8
    warm(_cfg(), store, TOKS)  # a pure-KV writer adds KV pages 9..12, no state
    e = make_engine(_cfg(), store, sidecars=("mamba",))
    e.submit("r", TOKS)
    r = settle(e, "r")
    assert r.storage_hit == 8 * PS and r.computed == 4 * PS
    assert e.explain("r")["in_l3"] == {"answer": True, "tokens": 32, "candidate_tokens": 48}
    assert "mamba" in r.nodes[7].side and e.verify_sidecars()


def test_swa_window_requires_every_trailing_page() -> None:
    """SWA state stored only for the last page of the window: no endpoint is restorable."""
    store = new_store()
    warm(_cfg(), store, TOKS, sidecars=("swa",))
    storage = make_storage(store)
    e = make_engine(_cfg(), storage=storage, sidecars=("swa",))
    # drop the SWA object of page 11 (the first page of the 2-page window ending at 12)
    hashes = e.s.tree.hashes(TOKS, None)
    from hicache_sdk.spec import PoolTransfer

    res = storage.batch_exists_v2(
        hashes,
        [PoolTransfer(name="swa", keys=["x"] * SWA_WINDOW, hit_policy=PoolHitPolicy.TRAILING_PAGES)],  # type: ignore[arg-type]
    )
    assert res.kv_hit_pages == 12 and res.restorable_prefix_pages == [12]
    raw = storage.raw_transport
    names = [n for n in list(raw._store.objects) if hashes[10] in n and "swa" in n]
    assert len(names) == 1
    raw.delete(names)
    e.submit("r", TOKS)
    r = settle(e, "r")
    assert r.storage_hit == 0
    assert e.explain("r")["why_not"] == [Abort.BELOW_THRESHOLD.value]  # the query found no endpoint


def test_sidecar_staging_shortfall_revokes_and_frees_the_kv() -> None:
    store = new_store()
    warm(_cfg(), store, TOKS, sidecars=("mamba",))
    e = make_engine(_cfg(), store, sidecars=("mamba",))
    pool = e.s.sidecars[0].pool
    grab = pool.alloc(pool.available_size())  # the Mamba host pool is full (nothing evictable)
    host_free = e.s.host.available_size()
    e.submit("r", TOKS)
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.prefetcher.drain()
    assert "r" not in e.prefetcher.ongoing and e.s.host.available_size() == host_free
    ex = e.explain("r")
    assert ex["why_not"] == [Abort.AUX_ALLOC_FAILED.value]
    # SGLang's counting: the aux pool's tokens, the whole hit unfulfilled and deferred
    assert ex["unfulfilled_tokens"] == {"host_capacity": 48} and ex["deferred_tokens"] == {
        "host_capacity": 48
    }
    assert e.s.counters.snapshot()[lc.AUX_ALLOC_FAILED] == 1  # one Mamba state (window 1, 1 slot)
    assert e.prefetcher.tokens_occupied == 0 and all(n.host_lock_ref == 0 for n in e.s.tree.walk())
    pool.free(grab)


def test_hybrid_timeout_quarantines_sidecar_staging_of_a_read_in_flight() -> None:
    store = new_store()
    warm(_cfg("timeout"), store, TOKS, sidecars=("mamba",))
    e = make_engine(_cfg("timeout"), store, sidecars=("mamba",))
    pool = e.s.sidecars[0].pool
    side_free = pool.available_size()
    e.submit("r", TOKS)
    assert e.try_admit("r") is None
    e.s.runner.step()  # type: ignore[attr-defined]  # query
    e.prefetcher.drain()  # staging allocated, read submitted but not run
    assert pool.available_size() == side_free - 1
    e.s.clock.advance(10.0)  # type: ignore[attr-defined]
    r = e.try_admit("r")
    assert r is not None and r.storage_hit == 0
    assert e.explain("r")["why_not"] == [Abort.TIMEOUT.value, Abort.HYBRID_INCOMPLETE.value]
    held = [op for op in e.prefetcher.quarantine_ops]
    assert len(held) == 1 and any(p is pool for p, _ in held[0].quarantined)
    side_held = sum(len(n.side["mamba"]) for n in e.s.tree.walk() if "mamba" in n.side)
    assert side_held == 1  # the computed request's own state (write-through)
    assert pool.available_size() == side_free - side_held - 1  # the staging slot is not reusable yet
    e.s.runner.run_all()  # type: ignore[attr-defined]  # the abandoned read ends
    assert not e.prefetcher.quarantine_ops
    e.writer.drain()
    assert pool.available_size() == side_free - side_held


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"name": "kv"}, "anchor"),
        ({"hit_policy": PoolHitPolicy.BLOCK_GROUPS}, "unsupported hit_policy"),
        ({"hit_policy": PoolHitPolicy.ALL_PAGES}, "must be TRAILING_PAGES"),
        ({"kv_derived": True}, "must be ALL_PAGES"),
        ({"window_pages": 0}, "window_pages"),
    ],
)
def test_sidecar_spec_rejects_bad_arguments(kw: dict[str, object], msg: str) -> None:
    args: dict[str, object] = {"name": "mamba", "pool": object()}
    args.update(kw)
    with pytest.raises(ValueError, match=msg):
        Sidecar(**args)  # type: ignore[arg-type]


def test_partial_host_allocation_ends_on_a_restorable_endpoint() -> None:
    """Host memory for 11 of 12 pages: the hit is trimmed to the agreed endpoint 8 (the Mamba
    state at page 11 does not exist), not to the 11 pages allocated."""
    store = new_store()
    warm(_cfg(), store, TOKS[: 8 * PS], sidecars=("mamba",))
    warm(_cfg(), store, TOKS, sidecars=("mamba",))  # states at pages 8 and 12
    e = make_engine(_cfg(), store, sidecars=("mamba",), host_tokens=40)  # 44 slots: 11 pages
    free = e.s.host.available_size()
    e.submit("r", TOKS)
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.prefetcher.drain()
    op = e.prefetcher.ongoing["r"]
    assert op.endpoints == [8, 12] and op.hit_tokens == 8 * PS
    assert e.s.host.available_size() == free - 8 * PS  # the 3 pages past the endpoint were freed
    r = settle(e, "r")
    assert r.storage_hit == 8 * PS and e.s.counters.causes()[Abort.SIDECAR_MISS.value] == 0
