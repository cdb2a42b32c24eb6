"""``mooncake`` (``MooncakeStore``): ``clear()`` removes every key in the Mooncake cluster,
including those of other deployments that share it under another ``extra_backend_tag``.

``MooncakeStore`` prefixes every key it writes with ``config_prefix`` (``extra_backend_tag``
and the model name, "to isolate tenants and models sharing one store";
``mem_cache/storage/mooncake_store/mooncake_store.py``, ``__init__``), but its ``clear()`` is
``self.store.remove_all()`` (same file, ``clear``), which removes every object of the
cluster. SGLang calls ``clear()`` from its cache-flush path, so flushing one deployment's
cache wipes its neighbours'. SGLang's base class does not state what ``clear()`` must scope;
the backend's own namespacing does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang_pools import PAGE_SIZE, mha_pool
from sglang_servers import MooncakeCluster

#: mooncake_master's default --default_kv_lease_ttl (ms) in seconds.
LEASE_S = 10.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[MooncakeCluster]:
    c = MooncakeCluster(holder_bytes=64 << 20)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _store(cluster: MooncakeCluster, tag: str, pool: Any) -> Any:
    config = sgl.HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="org/model",
        extra_config={
            "master_server_address": cluster.address, "protocol": "tcp", "local_hostname": "127.0.0.1",
            "metadata_server": "P2PHANDSHAKE", "global_segment_size": 32 << 20, "extra_backend_tag": tag,
        },
    )  # fmt: skip
    store = StorageBackendFactory.create_backend("mooncake", config, pool)
    store.register_mem_pool_host(pool)
    return store


@pytest.mark.xfail(
    strict=True, reason="SGLang 0.5.23: MooncakeStore.clear() is remove_all(), across every tag"
)
def test_clear_of_one_tenant_keeps_another_tenants_pages(cluster: MooncakeCluster) -> None:
    pool_a, pool_b = mha_pool("page_first"), mha_pool("page_first")
    tenant_a, tenant_b = _store(cluster, "tenant-a", pool_a), _store(cluster, "tenant-b", pool_b)
    try:
        keys = ["page-1", "page-2"]
        assert tenant_a.batch_set_v1(keys, torch.arange(0, 2 * PAGE_SIZE, dtype=torch.int64)) == [True, True]
        assert tenant_a.batch_exists(keys) == 2
        # Mooncake keeps a fresh object under a lease (the master's --default_kv_lease_ttl,
        # 10 s) and remove_all() without force skips leased objects: wait it out, as any
        # real cache flush would
        time.sleep(LEASE_S + 1)
        tenant_b.clear()  # tenant B flushes its own cache
        assert tenant_a.batch_exists(keys) == 2, "tenant B's clear() removed tenant A's pages"
    finally:
        tenant_a.close()
        tenant_b.close()
