"""``shm`` (``HiCacheShm``) acknowledges every write and stores nothing.

SGLang's controller backs a page up with ``batch_set`` (generic path, ``shm`` implements no
v1) and treats ``True`` as "this page is in storage": its backup counters and the radix
tree's backed-up marks follow (``managers/cache_controller.py``, ``_generic_page_set`` and
the backup loop). ``HiCacheShm.batch_set`` / ``batch_set_v2`` return ``True`` for every
page while ``exists`` / ``batch_get`` / ``batch_exists_v2`` always miss
(``mem_cache/storage/shm/hicache_shm.py``): the class is a placeholder for the shared-memory
host allocator, but the factory registers it as a storage backend named ``shm``.
"""

from __future__ import annotations

import pytest
import torch
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang_pools import mha_pool


@pytest.mark.xfail(strict=True, reason="SGLang 0.5.23: shm returns True for writes it drops")
def test_a_page_shm_accepted_can_be_read_back() -> None:
    pool = mha_pool("page_first")
    config = sgl.HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="org/model", extra_config={},
    )  # fmt: skip
    store = StorageBackendFactory.create_backend("shm", config, pool)
    store.register_mem_pool_host(pool)
    page = pool.get_data_page(0, flat=True).clone().random_(0, 100)
    assert store.batch_set(["page-a"], [page]) is True  # the controller counts this page as backed up
    got = store.batch_get(["page-a"], [torch.zeros_like(page)])
    assert got[0] is not None and torch.equal(got[0], page), "an acknowledged page was not stored"
