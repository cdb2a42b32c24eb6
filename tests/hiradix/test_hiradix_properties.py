"""Property tests (hypothesis) of the read path's page alignment and hit-boundary merging.

* Alignment: whatever the page size and the device / host runs, the storage candidate is the
  page-aligned rest of the request, its hash chain continues the tree's from the anchor, and a
  prefetch reserves exactly that span.
* Merging: with KV, a Mamba pool (TRAILING, N=1) and an SWA pool (TRAILING, N=2) stored on
  arbitrary pages of the memory backend, the tokens a cold engine commits from L3 are exactly
  the largest endpoint restorable for every pool (0 when under the threshold), the committed
  states hold the bytes written for their prefix, and the flag-vector MIN over ranks is the
  intersection of their restorable sets.
"""

from __future__ import annotations

import torch
from hiradix_helpers import SWA_WINDOW, make_engine, make_sidecars, make_storage, new_store, settle
from hypothesis import given, settings
from hypothesis import strategies as st

from hicache_sdk.hiradix import RadixTree, ReadPathConfig, page_kv, restorable_flags
from hicache_sdk.hiradix.sidecars import transfer, write_side_page
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.spec import PoolHitPolicy


@given(
    ps=st.sampled_from([1, 2, 4, 16]),
    n=st.integers(0, 80),
    dev_pages=st.integers(0, 6),
    host_pages=st.integers(0, 6),
)
def test_storage_span_is_the_page_aligned_rest_and_continues_the_chain(
    ps: int, n: int, dev_pages: int, host_pages: int
) -> None:
    tokens = list(range(10, 10 + n))
    tree = RadixTree(ps)
    nodes = tree.insert(tree.root, tokens[: (dev_pages + host_pages) * ps])
    for i, node in enumerate(nodes):
        slot = torch.arange(i * ps, (i + 1) * ps)
        if i < dev_pages:
            node.value = slot
        node.host_value = slot
    m = tree.match_prefix(tokens)
    aligned = n // ps * ps
    assert m.device_len % ps == 0 and m.host_len % ps == 0
    assert m.device_len == min(dev_pages, n // ps) * ps
    assert m.device_len + m.host_len == min(dev_pages + host_pages, n // ps) * ps
    assert m.storage_span == tokens[m.device_len + m.host_len : aligned]
    assert len(m.storage_span) % ps == 0
    k = (m.device_len + m.host_len) // ps
    assert tree.hashes(m.storage_span, m.last_host_node.hash) == tree.hashes(tokens, None)[k:]


@given(n=st.integers(0, 60), ps=st.sampled_from([1, 4]), thr=st.sampled_from([0, 5, 8]))
def test_prefetch_reserves_exactly_the_aligned_span(n: int, ps: int, thr: int) -> None:
    cfg = ReadPathConfig(page_size=ps, prefetch_threshold=thr, load_back_threshold=1)
    e = make_engine(cfg, new_store())
    e.submit("r", list(range(n)))
    op = e.prefetcher.ongoing.get("r")
    aligned = n // ps * ps
    if aligned < cfg.effective_prefetch_threshold:
        assert op is None and e.prefetcher.tokens_occupied == 0
    else:
        assert op is not None and op.key == list(range(aligned)) and e.prefetcher.tokens_occupied == aligned


PS = 4
GEOM = {"layer_num": 2, "head_num": 1, "head_dim": 4}


def _reference(kv: list[bool], mamba: list[bool], swa: list[bool]) -> int:
    kv_pages = 0
    while kv_pages < len(kv) and kv[kv_pages]:
        kv_pages += 1
    ends = [p for p in range(1, kv_pages + 1) if mamba[p - 1] and all(swa[max(0, p - SWA_WINDOW) : p])]
    return max(ends, default=0)


def _store_pages(store: str, tokens: list[int], kv: list[bool], mamba: list[bool], swa: list[bool]) -> None:
    """Write exactly the chosen pages' objects (KV, Mamba state, SWA page) with the bytes
    an engine would have written for that prefix."""
    n = len(kv)
    hashes = RadixTree(PS).hashes(tokens, None)
    host = MHAHostPool(n * PS, PS, dtype=torch.float32, pin_memory=False, **GEOM)  # type: ignore[arg-type]
    side = {sc.name: sc for sc in make_sidecars(("mamba", "swa"), PS, n * PS)}
    w = make_storage(store)
    w.register_mem_pool_host(host)
    for sc in side.values():
        w.register_mem_host_pool_v2(sc.pool, sc.name)
    shape = (2, PS, GEOM["layer_num"], GEOM["head_num"], GEOM["head_dim"])
    for i, h in enumerate(hashes):
        idx = torch.arange(i * PS, (i + 1) * PS)
        host.kv_buffer.index_copy_(1, idx, page_kv(h, shape, torch.float32))
        if kv[i]:
            assert w.batch_set_v1([h], idx) == [True]
        for name, present in (("mamba", mamba[i]), ("swa", swa[i])):
            sc = side[name]
            sidx = torch.arange(i * sc.slots_per_page, (i + 1) * sc.slots_per_page)
            write_side_page(sc, int(sidx[0]), h)
            if present:
                res = w.batch_set_v2([transfer(name, keys=[h], host_indices=sidx, hit_policy=sc.hit_policy)])
                assert res[name] == [True]


pages_st = st.integers(1, 8)


@settings(max_examples=40)
@given(data=st.data(), n=pages_st)
def test_cold_engine_commits_the_largest_endpoint_restorable_for_every_pool(
    data: st.DataObject, n: int
) -> None:
    kv = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), "kv")
    mamba = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), "mamba")
    swa = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), "swa")
    tokens = list(range(400, 400 + n * PS))
    store = new_store()
    _store_pages(store, tokens, kv, mamba, swa)
    cfg = ReadPathConfig(
        page_size=PS, prefetch_threshold=0, load_back_threshold=1, prefetch_policy="wait_complete"
    )
    e = make_engine(cfg, store, sidecars=("mamba", "swa"))
    e.submit("r", tokens)
    r = settle(e, "r")
    want = _reference(kv, mamba, swa)
    assert r.storage_hit == want * PS
    assert e.explain("r")["in_l3"]["tokens"] == want * PS  # type: ignore[index]
    assert e.verify(r.nodes) and e.verify_sidecars()
    if want:
        last = r.nodes[want - 1]
        assert "mamba" in last.side
        assert all("swa" in x.side for x in r.nodes[max(0, want - SWA_WINDOW) : want])


@given(
    span=st.integers(1, 10),
    ranks=st.lists(st.tuples(st.integers(0, 10), st.sets(st.integers(1, 10))), min_size=1, max_size=4),
)
def test_flag_vector_min_is_the_intersection_of_restorable_sets(
    span: int, ranks: list[tuple[int, set[int]]]
) -> None:
    vecs = [restorable_flags(span, min(hit, span), sorted(pts)) for hit, pts in ranks]
    flags = [min(col) for col in zip(*vecs)]
    agreed = max(p for p, f in enumerate(flags) if f)
    sets = [{p for p in pts if p <= min(hit, span)} for hit, pts in ranks]
    assert agreed == max(set.intersection(*sets), default=0)


def test_trailing_policy_transfer_shape() -> None:
    """The hit query's TRAILING transfer carries the window as placeholder keys."""
    from hicache_sdk.hiradix.sidecars import PLACEHOLDER, exists_transfers

    sc = make_sidecars(("swa", "mamba", "indexer"), PS, 64)
    at_root = exists_transfers(sc, 1, at_root=True)
    assert [(str(t.name), t.keys) for t in at_root] == [
        ("swa", [PLACEHOLDER]),
        ("mamba", [PLACEHOLDER]),
        ("indexer", None),
    ]
    mid = exists_transfers(sc, 1, at_root=False)  # a mid-tree span shorter than the SWA window
    assert [str(t.name) for t in mid] == ["mamba", "indexer"]
    assert mid[0].hit_policy == PoolHitPolicy.TRAILING_PAGES and mid[1].hit_policy == PoolHitPolicy.ALL_PAGES
