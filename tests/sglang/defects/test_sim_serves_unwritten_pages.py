"""``sim`` (``SimHiCacheStorage``) reports a hit for a page whose bytes it never stored.

SGLang's controller reads a zero-copy prefetch with ``batch_get_v1(keys, host_indices)``
and counts the leading run of ``True`` as pages now in the host pool
(``managers/cache_controller.py``, ``_page_get_zero_copy``). ``sim``'s ``batch_set_v1``
records the key only and ``batch_get_v1`` returns its presence, leaving the host pages as
they were (``mem_cache/storage/sim_storage.py``, ``batch_get_v1`` / ``batch_set_v1``). So
another host pool (a second engine, or the same one after its host copy was evicted) is
told "hit" and serves whatever its pages held. The module's docstring calls this
benchmark-only; the factory registers it beside the real backends under ``sim``.
"""

from __future__ import annotations

import pytest
import torch
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang_pools import PAGE_SIZE, mha_pool


def _config() -> sgl.HiCacheStorageConfig:
    return sgl.HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="org/model", extra_config={},
    )  # fmt: skip


@pytest.mark.xfail(
    strict=True, reason="SGLang 0.5.23: sim stores keys only and serves unwritten host pages as hits"
)
def test_a_hit_in_sim_brings_the_pages_bytes() -> None:
    writer_pool, reader_pool = mha_pool("page_first"), mha_pool("page_first")
    store = StorageBackendFactory.create_backend("sim", _config(), writer_pool)
    store.register_mem_pool_host(writer_pool)
    keys = ["page-a", "page-b"]
    src = torch.arange(0, 2 * PAGE_SIZE, dtype=torch.int64)
    writer_pool.kv_buffer.view(torch.uint8).random_(0, 256, generator=torch.Generator().manual_seed(1))
    written = [writer_pool.get_data_page(int(i), flat=True).clone() for i in src[::PAGE_SIZE]]
    assert store.batch_set_v1(keys, src) == [True, True]

    # the same store serves a second host pool (SGLang reuses one backend across evictions)
    store.register_mem_pool_host(reader_pool)
    dst = torch.arange(4 * PAGE_SIZE, 6 * PAGE_SIZE, dtype=torch.int64)
    hits = store.batch_get_v1(keys, dst)
    hit_pages = hits.index(False) if False in hits else len(hits)  # the controller's leading run
    assert hit_pages == 2
    got = [reader_pool.get_data_page(int(i), flat=True) for i in dst[::PAGE_SIZE]]
    assert all(torch.equal(g, w) for g, w in zip(got, written)), "a hit left the host page unwritten"
