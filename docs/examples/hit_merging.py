"""The hit-merging example of ``docs/concepts.md``, computed by our implementation.

Ten KV pages are stored; the Mamba pool (TRAILING_PAGES, window 1) holds the states after
pages 5 and 8 (page indices 4 and 7); the SWA pool (TRAILING_PAGES, window 2) holds pages
3, 4, 7, 8 (so the windows ending at prefixes 5 and 9 are complete). The article's rule
("final usable pages = the minimum of the pools' boundaries") answers 8; SGLang 0.5.23's
restorable-endpoint intersection answers 5, the only prefix both pools can restore.

The same numbers three ways: the pure fold (``hicache_sdk.paged.merge``), a real backend's
``batch_exists_v2`` over real host pools (the ``memory`` backend, so through the paged
adapter, the key scheme and the transport), and the cross-rank agreement of the read path
(``hicache_sdk.hiradix.ranks``). Run it::

    .venv/bin/python docs/examples/hit_merging.py
"""

from __future__ import annotations

import hashlib
import uuid

import torch

from hicache_sdk import HiCacheStorageConfig, PoolHitPolicy, PoolName, PoolTransfer
from hicache_sdk.hostpool import MambaHostPool, MHAHostPool, SWAHostPool
from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.paged.merge import PoolPresence, fold_exists_v2, fold_min_of_maxima
from hicache_sdk.hiradix.ranks import restorable_flags

PAGES = 10
MAMBA_PAGES = [4, 7]  # states after pages 5 and 8
SWA_PAGES = [3, 4, 7, 8]  # window 2: complete before prefixes 5 and 9
PAGE_SIZE = 4


def presence(indices: list[int]) -> list[bool]:
    return [i in indices for i in range(PAGES)]


def pure_fold() -> dict[str, object]:
    """The fold alone: both rules over the same presence vectors."""
    kv = [True] * PAGES
    pools = [
        PoolPresence("mamba", PoolHitPolicy.TRAILING_PAGES, 1, presence(MAMBA_PAGES)),
        PoolPresence("swa", PoolHitPolicy.TRAILING_PAGES, 2, presence(SWA_PAGES)),
    ]
    new, old = fold_exists_v2(kv, pools), fold_min_of_maxima(kv, pools)
    return {
        "0.5.23 kv_hit_pages": new.kv_hit_pages,
        "0.5.23 restorable_prefix_pages": new.restorable_prefix_pages,
        "0.5.23 extra_pool_hit_pages": new.extra_pool_hit_pages,
        "min-of-maxima kv_hit_pages": old.kv_hit_pages,
        "min-of-maxima extra_pool_hit_pages": old.extra_pool_hit_pages,
    }


def _slots(pool: object, n: int) -> torch.Tensor:
    return torch.arange(n * int(pool.page_size), dtype=torch.int64)  # type: ignore[attr-defined]


def through_backend() -> dict[str, object]:
    """Store the pages with ``batch_set_v2`` and ask ``batch_exists_v2``, as SGLang does."""
    store = f"concepts-{uuid.uuid4().hex}"
    kv = MHAHostPool(16 * PAGE_SIZE, PAGE_SIZE, 2, 2, 8, dtype=torch.bfloat16, pin_memory=False)
    swa = SWAHostPool(16 * PAGE_SIZE, PAGE_SIZE, 2, 2, 8, dtype=torch.bfloat16, pin_memory=False)
    mamba = MambaHostPool(8, (2, 3), [(3, 4)], layer_num=2, pin_memory=False)
    backend = MemoryStorage(HiCacheStorageConfig(model_name="org/model", extra_config={"store": store}), {})
    try:
        backend.register_mem_pool_host(kv)
        backend.register_mem_host_pool_v2(kv, "kv")
        backend.register_mem_host_pool_v2(mamba, "mamba")
        backend.register_mem_host_pool_v2(swa, "swa")
        backend.on_host_pools_registered()
        keys = [hashlib.sha256(f"page-{i}".encode()).hexdigest() for i in range(PAGES)]
        mamba_keys = [keys[i] for i in MAMBA_PAGES]
        swa_keys = [keys[i] for i in SWA_PAGES]
        written = backend.batch_set_v2(
            [
                PoolTransfer(PoolName.KV, _slots(kv, PAGES), keys=keys),
                PoolTransfer(PoolName.MAMBA, _slots(mamba, len(mamba_keys)), keys=mamba_keys),
                PoolTransfer(PoolName.SWA, _slots(swa, len(swa_keys)), keys=swa_keys),
            ]
        )
        assert all(all(v) for v in written.values()), written
        # The hit query: one TRAILING transfer per pool; only the number of keys matters
        # (the window), the names are placeholders, existence is checked on the KV hashes.
        result = backend.batch_exists_v2(
            keys,
            [
                PoolTransfer(PoolName.MAMBA, keys=["_"], hit_policy=PoolHitPolicy.TRAILING_PAGES),
                PoolTransfer(PoolName.SWA, keys=["_", "_"], hit_policy=PoolHitPolicy.TRAILING_PAGES),
            ],
        )
        return {
            "kv_hit_pages": result.kv_hit_pages,
            "restorable_prefix_pages": result.restorable_prefix_pages,
            "extra_pool_hit_pages": result.extra_pool_hit_pages,
        }
    finally:
        backend.close()
        drop_store(store)


def across_ranks() -> dict[str, object]:
    """Two TP ranks: rank 0 as above; rank 1's store lost the Mamba state after page 5,
    so it can restore only prefix 8. The read path MIN-reduces the flag vectors."""
    r0 = fold_exists_v2(
        [True] * PAGES,
        [
            PoolPresence("mamba", PoolHitPolicy.TRAILING_PAGES, 1, presence(MAMBA_PAGES)),
            PoolPresence("swa", PoolHitPolicy.TRAILING_PAGES, 2, presence(SWA_PAGES)),
        ],
    )
    r1 = fold_exists_v2(
        [True] * PAGES,
        [
            PoolPresence("mamba", PoolHitPolicy.TRAILING_PAGES, 1, presence([7])),
            PoolPresence("swa", PoolHitPolicy.TRAILING_PAGES, 2, presence([3, 4, 6, 7, 8])),
        ],
    )
    f0 = restorable_flags(PAGES, r0.kv_hit_pages, r0.restorable_prefix_pages)
    f1 = restorable_flags(PAGES, r1.kv_hit_pages, r1.restorable_prefix_pages)
    agreed = [min(a, b) for a, b in zip(f0, f1)]
    return {
        "rank0 restorable": r0.restorable_prefix_pages,
        "rank1 restorable": r1.restorable_prefix_pages,
        "rank0 flags": f0,
        "rank1 flags": f1,
        "MIN flags": agreed,
        "agreed hit pages": max(p for p, f in enumerate(agreed) if f),
    }


def main() -> dict[str, dict[str, object]]:
    out = {"fold": pure_fold(), "memory backend": through_backend(), "two ranks": across_ranks()}
    for section, values in out.items():
        print(f"[{section}]")
        for k, v in values.items():
            print(f"  {k}: {v}")
    return out


if __name__ == "__main__":
    main()
