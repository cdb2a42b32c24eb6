"""Thresholds one unit either side, at page size 1 and at page granularity."""

from __future__ import annotations

import pytest
from hiradix_helpers import make_engine, new_store, settle, warm

from hicache_sdk.hiradix import Abort, ReadPathConfig


@pytest.mark.parametrize(("page_size", "threshold"), [(1, 8), (4, 8), (4, 12)])
@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_prefetch_threshold_before_query(page_size: int, threshold: int, delta: int) -> None:
    cfg = ReadPathConfig(page_size=page_size, prefetch_threshold=threshold, load_back_threshold=1)
    eff = cfg.effective_prefetch_threshold
    assert eff == max(threshold, page_size)
    n = eff + delta * page_size  # one unit either side: one page (one token at page size 1)
    store = new_store()
    toks = list(range(1000, 1000 + n))
    warm(cfg, store, toks)
    e = make_engine(cfg, store)
    e.submit("r", toks)
    r = settle(e, "r")
    if n < eff:
        assert e.s.counters.causes()[Abort.BELOW_THRESHOLD.value] == 1
        assert r.storage_hit == 0 and r.computed == n
    else:
        assert e.s.counters.causes()[Abort.BELOW_THRESHOLD.value] == 0
        assert r.storage_hit == n and r.computed == 0
    assert e.verify(r.nodes)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_prefetch_threshold_after_query(page_size: int, delta: int) -> None:
    """The span is long enough but the stored hit is one unit short of / at / over the threshold."""
    cfg = ReadPathConfig(page_size=page_size, prefetch_threshold=8, load_back_threshold=1)
    eff = cfg.effective_prefetch_threshold
    stored = eff + delta * page_size
    store = new_store()
    toks = list(range(5000, 5000 + eff * 3))
    warm(cfg, store, toks[:stored])
    e = make_engine(cfg, store)
    e.submit("r", toks)
    r = settle(e, "r")
    below = e.s.counters.causes()[Abort.BELOW_THRESHOLD.value]
    assert (below, r.storage_hit) == ((1, 0) if stored < eff else (0, stored))
    assert e.explain("r")["in_l3"] == {"answer": True, "tokens": stored, "candidate_tokens": len(toks)}
    assert e.verify(r.nodes)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_load_back_threshold(page_size: int, delta: int) -> None:
    from hicache_sdk.hiradix import load_back

    cfg = ReadPathConfig(page_size=page_size, load_back_threshold=8, storage_enabled=False)
    e = make_engine(cfg)
    n = 8 + delta * page_size
    e.submit("a", list(range(n)))
    r = settle(e, "a")
    last = r.nodes[-1]
    e.s.evict_device(n)  # write_through put them on host; now host-only
    assert all(not x.on_device and x.on_host for x in r.nodes)
    got = load_back(e.s, last, None, "lb")
    assert got == (0 if n < 8 else n)
    assert all(x.on_device for x in r.nodes) == (n >= 8)
    assert e.s.counters.causes()[Abort.BELOW_LOAD_BACK_THRESHOLD.value] == (1 if n < 8 else 0)
    assert all(x.lock_ref == 0 and x.host_lock_ref == 0 for x in e.s.tree.walk())


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_load_back_quota(delta: int) -> None:
    from hicache_sdk.hiradix import load_back

    cfg = ReadPathConfig(page_size=4, load_back_threshold=1, storage_enabled=False)
    e = make_engine(cfg)
    e.submit("a", list(range(16)))
    r = settle(e, "a")
    e.s.evict_device(16)
    got = load_back(e.s, r.nodes[-1], 16 + delta * 4, "q")
    assert got == (0 if delta < 0 else 16)
    assert e.s.counters.causes()[Abort.OVER_QUOTA.value] == (1 if delta < 0 else 0)


def test_load_back_copy_failure_commits_nothing() -> None:
    from hicache_sdk.hiradix import load_back

    cfg = ReadPathConfig(page_size=4, load_back_threshold=1, storage_enabled=False)
    e = make_engine(cfg)
    e.submit("a", list(range(16)))
    r = settle(e, "a")
    e.s.evict_device(16)
    used = e.s.dev.used_pages()
    e.s.dev.fail_copies = 1
    assert load_back(e.s, r.nodes[-1], None, "f") == 0
    assert not any(x.on_device for x in r.nodes) and e.s.dev.used_pages() == used
    assert all(x.lock_ref == 0 and x.host_lock_ref == 0 for x in e.s.tree.walk())
    assert e.explain("f")["why_not"] == ["transfer_failed"]
    assert load_back(e.s, r.nodes[-1], None, "g") == 16 and e.verify(r.nodes)


def test_capacity_limit() -> None:
    cfg = ReadPathConfig(page_size=4, prefetch_threshold=8)
    e = make_engine(cfg, new_store(), host_tokens=64)
    limit = e.prefetcher.capacity_limit
    assert limit == int(0.5 * e.s.host.size)
    e.submit("a", list(range(limit + 4)))  # reaches the limit (no query has run yet)
    e.submit("b", list(range(100, 100 + 8)))
    assert e.s.counters.causes()[Abort.CAPACITY.value] == 1
    assert e.explain("b")["why_not"] == ["capacity"]


def test_timeout_formula() -> None:
    cfg = ReadPathConfig()
    assert (
        cfg.prefetch_policy == "timeout" and cfg.prefetch_threshold == 256 and cfg.load_back_threshold == 10
    )
    assert cfg.timeout_for(0) == 1.0 and cfg.timeout_for(1024) == 1.25 and cfg.timeout_for(40960) == 11.0


def test_effective_threshold_is_at_least_one_page() -> None:
    assert ReadPathConfig(page_size=64, prefetch_threshold=0).effective_prefetch_threshold == 64
    assert ReadPathConfig(page_size=1, prefetch_threshold=0).effective_prefetch_threshold == 1
