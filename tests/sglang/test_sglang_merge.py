"""Our v2 hit merging (``hicache_sdk.paged.merge.fold_exists_v2``) against the REAL
SGLang 0.5.23 ``HiCacheFile.batch_exists_v2`` on the same presence patterns (empty files
named by SGLang itself), including the spec 2.1 vector the spec text gets wrong.
Collected only in ``tox -e sglang``."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sglang.srt.mem_cache import hicache_storage as sgl

from hicache_sdk.paged.merge import PoolPresence, fold_exists_v2
from hicache_sdk.spec import PoolHitPolicy

POOLS = ("mamba", "swa", "indexer")


def _sglang_file(root: Path) -> Any:
    cfg = sgl.HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True, model_name="m",
    )  # fmt: skip
    return sgl.HiCacheFile(cfg, file_path=str(root))


def _run_both(root: Path, kv: list[bool], pools: list[tuple[str, str, int, list[bool]]]) -> tuple[Any, Any]:
    for f in os.listdir(root):
        os.unlink(root / f)
    theirs = _sglang_file(root)
    keys = [hashlib.sha256(f"page{i}".encode()).hexdigest() for i in range(len(kv))]
    for i, present in enumerate(kv):
        if present:
            (root / f"{theirs._get_component_key(keys[i])}.bin").touch()
    transfers = []
    for name, policy, window, present in pools:
        for i, p in enumerate(present):
            if p:
                (root / f"{theirs._get_component_key(keys[i], name)}.bin").touch()
        transfers.append(
            sgl.PoolTransfer(
                name=sgl.PoolName(name), keys=["_"] * window, hit_policy=sgl.PoolHitPolicy(policy)
            )
        )
    got = theirs.batch_exists_v2(keys, transfers)
    ours = fold_exists_v2(kv, [PoolPresence(n, PoolHitPolicy(pol), w, pr) for n, pol, w, pr in pools])
    return got, ours


def _same(got: Any, ours: Any) -> None:
    assert got.kv_hit_pages == ours.kv_hit_pages
    assert {str(k): v for k, v in got.extra_pool_hit_pages.items()} == ours.extra_pool_hit_pages
    assert list(got.restorable_prefix_pages) == list(ours.restorable_prefix_pages or [])


def test_the_dsa_plus_mamba_vector(tmp_path: Path) -> None:
    """Spec 2.1 lists 'DSA (ALL, pages 0-2) plus Mamba (TRAILING w2, pages 2-3) -> 3'; the
    real 0.5.23 code (and ours) give 0: endpoints {1,2,3} and {4} do not intersect."""
    kv = [True] * 4
    pools = [
        ("indexer", "all_pages", 1, [True, True, True, False]),
        ("mamba", "trailing_pages", 2, [False, False, True, True]),
    ]
    got, ours = _run_both(tmp_path, kv, pools)
    _same(got, ours)
    assert got.kv_hit_pages == 0


_pool = st.tuples(
    st.sampled_from(POOLS),
    st.sampled_from(["all_pages", "trailing_pages"]),
    st.integers(1, 3),
    st.lists(st.booleans(), min_size=6, max_size=6),
)


@settings(max_examples=40, deadline=None)
@given(
    kv=st.lists(st.booleans(), min_size=1, max_size=6),
    pools=st.lists(_pool, max_size=3, unique_by=lambda p: p[0]),
)
def test_random_patterns_match_sglang(tmp_path_factory: Any, kv: list[bool], pools: list[Any]) -> None:
    root = tmp_path_factory.mktemp("merge")
    pools = [(n, pol, w, pr[: len(kv)]) for n, pol, w, pr in pools]
    got, ours = _run_both(root, kv, pools)
    _same(got, ours)
