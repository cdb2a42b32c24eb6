"""The model of what SGLang 0.5.23 does with a backend (routes, layouts, the controller's
call shapes and use of results) and the failure messages."""

from __future__ import annotations

import uuid

import pytest
import torch
from hicache_conformance import pools as P
from hicache_conformance.explain import describe_page, first_difference
from hicache_conformance.matrix import PoolCase
from hicache_conformance.sglang_path import Controller, Route

from hicache_sdk import HiCacheStorageConfig, PoolName
from hicache_sdk.memory import MemoryStorage, drop_store


def test_routes() -> None:
    assert Route().io_paths(True) == ("generic", "v1") and Route().io_paths(False) == ("generic",)
    assert Route("mooncake").io_paths(True) == ("v1",) and Route("file").io_paths(True) == ("generic",)
    assert Route().layouts() == ("layer_first", "page_first", "page_first_direct")
    assert Route("mooncake").layouts() == ("page_first", "page_first_direct")
    assert Route("npu_memcache", "direct").layouts() == ("page_first_direct",)
    assert Route("dynamic", "direct").layouts() == ("layer_first", "page_first_direct")
    with pytest.raises(ValueError, match="io_backend"):
        Route(io_backend="gds")


@pytest.fixture
def attached() -> tuple[MemoryStorage, object]:
    store = f"ctl-{uuid.uuid4().hex[:8]}"
    b = MemoryStorage(HiCacheStorageConfig(model_name="m", extra_config={"store": store}), {})
    pool = P.make_kv_pool(PoolCase(page_size=1))
    b.register_mem_pool_host(pool)
    b.register_mem_host_pool_v2(pool, PoolName.KV)
    yield b, pool
    b.close()
    drop_store(store)


@pytest.mark.parametrize("path", ["generic", "v1"])
def test_controller_moves_spans_in_batches_of_128_and_commits_the_leading_run(attached, path) -> None:
    b, pool = attached
    keys = [f"{i:064x}" for i in range(130)]
    data = [P.fill_page(pool, i, k) for i, k in enumerate(keys)]
    ctl = Controller(b, pool, path)
    assert ctl.backup(keys, 0) == 130
    sets = [c for c in ctl.calls if c.method in ("batch_set", "batch_set_v1")]
    assert [c.keys for c in sets] == [128, 2]
    assert ctl.prefetch(keys, 140) == 130 and [P.page_bytes(pool, 140 + i) for i in range(130)] == data
    gets = [c for c in ctl.calls if c.method in ("batch_get", "batch_get_v1")]
    assert [c.keys for c in gets] == [128, 2]
    missing = "f" * 64
    assert ctl.prefetch([keys[0], missing, keys[1]], 10) == 1
    assert ctl.hit_query([*keys, missing]) == 130
    assert "batch_exists(128 keys) -> 128" in ctl.story(10)


def test_messages_name_short_reads_and_misplaced_pages() -> None:
    want = bytes(range(200)) * 2
    assert first_difference(want, want) is None and first_difference(want, want[:10]) == 10
    short = want[:100] + b"\x5a" * 300
    assert "a short read, only the first 100 of 400 bytes arrived" in describe_page("p", want, short)
    other = bytes(400)
    assert "got the bytes of q" in describe_page("p", want, other, {"q": other})
    assert "got a miss" in describe_page("p", want, None)
    assert describe_page("p", want, want) == ""


def test_suite_pools_have_sglangs_attributes() -> None:
    pool = P.make_kv_pool(PoolCase(kind="mha", layout="page_first", page_size=4))
    assert pool.target_layer_num == pool.layer_num and pool.dcp_size == 1 and pool.dcp_rank == 0
    assert pool.stores_page_envelope is False and pool.logical_size == pool.size
    assert isinstance(pool.is_stride_page_aligned(), bool)
    assert P.make_kv_pool(PoolCase(kind="mla", layout="layer_first")).is_stride_page_aligned() is False
    info = P.source_info()
    assert info["kv"] in ("hicache_sdk", "sglang") and info["indexer"] == "hicache_sdk"
    assert torch.is_tensor(pool.get_dummy_flat_data_page())
