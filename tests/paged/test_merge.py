"""v2 hit folding: spec 2.1 vectors, a brute-force oracle, and the 2.2 difference."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk.paged.merge import PoolPresence, fold_exists_v2, fold_min_of_maxima
from hicache_sdk.spec import PoolHitPolicy, count_pool_hits

ALL = PoolHitPolicy.ALL_PAGES
TRAIL = PoolHitPolicy.TRAILING_PAGES
T, F = True, False


def on(n, pages):
    return [i in pages for i in range(n)]


def test_all_pages_two_of_four():
    r = fold_exists_v2([T] * 4, [PoolPresence("indexer", ALL, 0, on(4, {0, 1}))])
    assert (r.kv_hit_pages, r.extra_pool_hit_pages, r.restorable_prefix_pages) == (
        2,
        {"kv": 4, "indexer": 2},
        [1, 2],
    )


def test_all_pages_cannot_extend_past_kv():
    r = fold_exists_v2([T, T, F, F], [PoolPresence("indexer", ALL, 0, [T] * 4)])
    assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (2, {"kv": 2, "indexer": 2})


def test_trailing_window_two_on_tail():
    r = fold_exists_v2([T] * 4, [PoolPresence("mamba", TRAIL, 2, on(4, {2, 3}))])
    assert (r.kv_hit_pages, r.restorable_prefix_pages, r.extra_pool_hit_pages["mamba"]) == (4, [4], 4)


def test_trailing_window_two_on_head():
    r = fold_exists_v2([T] * 4, [PoolPresence("mamba", TRAIL, 2, on(4, {0, 1}))])
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (2, [1, 2])


def test_trailing_absent():
    r = fold_exists_v2([T] * 4, [PoolPresence("mamba", TRAIL, 2, [F] * 4)])
    assert (r.kv_hit_pages, r.extra_pool_hit_pages, r.restorable_prefix_pages) == (0, {"kv": 4}, [])


def test_dsa_plus_mamba():
    # Spec 2.1 lists "DSA (ALL, pages 0-2) plus Mamba (TRAILING w2, pages 2-3) -> 3".
    # With a window of 2 that is the min-of-maxima answer (2.2); under the 2.1 rules
    # the Mamba endpoints are {4} and DSA's {1,2,3}, so the intersection is empty.
    # With Mamba's real window (N=1, keyed by the node's last page) 2.1 gives 3.
    dsa = PoolPresence("indexer", ALL, 0, on(4, {0, 1, 2}))
    w2 = PoolPresence("mamba", TRAIL, 2, on(4, {2, 3}))
    assert fold_min_of_maxima([T] * 4, [dsa, w2]).kv_hit_pages == 3
    r = fold_exists_v2([T] * 4, [dsa, w2])
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (0, [])
    assert r.extra_pool_hit_pages == {"kv": 4, "indexer": 3, "mamba": 4}
    w1 = PoolPresence("mamba", TRAIL, 1, on(4, {2, 3}))
    r = fold_exists_v2([T] * 4, [dsa, w1])
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (3, [3])
    assert r.extra_pool_hit_pages == {"kv": 4, "indexer": 3, "mamba": 4}


def test_all_and_trailing_keys_b_c():
    # KV a,b,c,d; ALL pool on all 4; TRAILING keys=["b","c"] (w=2) present on b, c
    pools = [PoolPresence("indexer", ALL, 0, [T] * 4), PoolPresence("swa", TRAIL, 2, on(4, {1, 2}))]
    r = fold_exists_v2([T] * 4, pools)
    assert r.kv_hit_pages == 3
    assert r.restorable_prefix_pages == [3]
    assert r.extra_pool_hit_pages == {"kv": 4, "indexer": 4, "swa": 3}


def test_no_kv_is_empty_and_skips_pools():
    r = fold_exists_v2([F, T], [PoolPresence("x", PoolHitPolicy.BLOCK_GROUPS, 0, [T, T])])
    assert (r.kv_hit_pages, r.extra_pool_hit_pages, r.restorable_prefix_pages) == (0, {}, [])
    assert fold_exists_v2([], []).restorable_prefix_pages == []


def test_no_pools_is_the_kv_prefix():
    r = fold_exists_v2([T, T, F, T], [])
    assert (r.kv_hit_pages, r.extra_pool_hit_pages, r.restorable_prefix_pages) == (2, {"kv": 2}, [1, 2])


def test_window_zero_means_one():
    r = fold_exists_v2([T] * 3, [PoolPresence("mamba", TRAIL, 0, on(3, {1}))])
    assert r.restorable_prefix_pages == [2]


def test_block_groups_and_unknown_raise():
    with pytest.raises(ValueError, match="block_groups"):
        fold_exists_v2([T], [PoolPresence("x", PoolHitPolicy.BLOCK_GROUPS, 0, [T])])
    with pytest.raises(ValueError, match="hit policy"):
        fold_exists_v2([T], [PoolPresence("x", "bogus", 0, [T])])  # type: ignore[arg-type]


def test_stops_early_when_empty():
    pools = [
        PoolPresence("mamba", TRAIL, 1, [F] * 3),
        PoolPresence("late", PoolHitPolicy.BLOCK_GROUPS, 0, [T] * 3),  # never reached
    ]
    r = fold_exists_v2([T] * 3, pools)
    assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (0, {"kv": 3})


def test_logical_kv_anchor():
    pools = [PoolPresence("deepseek_v4_c4", ALL, 0, [T, T, F])]
    r = fold_exists_v2([F, F, F], pools, logical_kv_anchor=True)
    assert (r.kv_hit_pages, r.extra_pool_hit_pages, r.restorable_prefix_pages) == (
        2,
        {"kv": 3, "deepseek_v4_c4": 2},
        [1, 2],
    )


def test_short_presence_counts_as_absent():
    r = fold_exists_v2([T] * 4, [PoolPresence("indexer", ALL, 0, [T, T])])
    assert r.kv_hit_pages == 2


def test_min_of_maxima_picks_an_unrestorable_endpoint():
    # spec 2.2: Mamba valid only at 5; SWA (w=2) valid at 6 and 4 -> old rule says 5,
    # but SWA cannot restore 5 (page 3 missing). The intersection is empty.
    mamba = PoolPresence("mamba", TRAIL, 1, on(6, {4}))
    swa = PoolPresence("swa", TRAIL, 2, on(6, {1, 2, 4, 5}))
    old = fold_min_of_maxima([T] * 6, [mamba, swa])
    new = fold_exists_v2([T] * 6, [mamba, swa])
    assert old.kv_hit_pages == 5
    assert old.restorable_prefix_pages is None
    assert (new.kv_hit_pages, new.restorable_prefix_pages) == (0, [])
    assert old.extra_pool_hit_pages == {"kv": 6, "mamba": 5, "swa": 6}


# -- brute force ------------------------------------------------------------------------
def brute(kv_present, pools, anchor=False):
    kv = len(kv_present) if anchor else next((i for i, x in enumerate(kv_present) if not x), len(kv_present))
    if kv == 0:
        return 0, {}, []
    hits = {"kv": kv}
    ok = set(range(1, kv + 1))
    for name, policy, window, present in pools:
        if not ok:
            break

        def has(i, present=present):
            return i < len(present) and present[i]

        if policy == ALL:
            good = {p for p in range(1, kv + 1) if all(has(i) for i in range(p))}
        else:
            n = max(1, window)
            good = {p for p in range(1, kv + 1) if all(has(i) for i in range(max(0, p - n), p))}
        if good:
            hits[name] = max(good)
        ok &= good
    return (max(ok) if ok else 0), hits, sorted(ok)


pool_st = st.tuples(
    st.sampled_from(["indexer", "mamba", "swa", "draft", "deepseek_v4_c4_state"]),
    st.sampled_from([ALL, TRAIL]),
    st.integers(0, 5),
    st.lists(st.booleans(), max_size=12),
)


@given(
    st.lists(st.booleans(), max_size=12),
    st.lists(pool_st, max_size=4),
    st.booleans(),
)
def test_matches_brute_force(kv_present, pools, anchor):
    got = fold_exists_v2(kv_present, [PoolPresence(*p) for p in pools], logical_kv_anchor=anchor)
    want = brute(kv_present, pools, anchor)
    assert (got.kv_hit_pages, got.extra_pool_hit_pages, got.restorable_prefix_pages) == want
    # the chosen hit is always restorable by every pool (unlike min-of-maxima)
    if got.kv_hit_pages:
        assert got.kv_hit_pages in got.restorable_prefix_pages


@given(st.lists(st.booleans(), max_size=12), st.lists(pool_st, max_size=4))
def test_intersection_never_exceeds_min_of_maxima(kv_present, pools):
    ps = [PoolPresence(*p) for p in pools]
    assert fold_exists_v2(kv_present, ps).kv_hit_pages <= fold_min_of_maxima(kv_present, ps).kv_hit_pages


# -- count_pool_hits ----------------------------------------------------------------------
@given(st.dictionaries(st.sampled_from(["kv", "mamba", "swa", "x"]), st.lists(st.booleans(), max_size=10)))
def test_count_pool_hits_is_the_leading_run(results):
    got = count_pool_hits(results)
    assert set(got) == set(results)
    for name, flags in results.items():
        n = got[name]
        assert all(flags[:n])
        assert n == len(flags) or flags[n] is False


def test_count_pool_hits_vectors():
    assert count_pool_hits({"kv": [T, T, F, T], "m": [], "s": [T, T]}) == {"kv": 2, "m": 0, "s": 2}
