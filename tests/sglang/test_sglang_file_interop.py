"""Directory compatibility with the REAL SGLang 0.5.23 ``HiCacheFile``: with
``key_scheme = "sglang-file"`` our file backend reads what SGLang wrote and SGLang reads
what we wrote, on SGLang's own host pools (MHA and MLA, layer_first and page_first).
Collected only in ``tox -e sglang``."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
import torch
from hicache_backend_file import FileStorage
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang_pools import PAGE_SIZE, POOLS

N = 6


def _keys(salt: str) -> list[str]:
    return [hashlib.sha256(f"{salt}-{i}".encode()).hexdigest() for i in range(N)]


def _config(root: str, *, mla: bool, layout: str, tp_rank: int = 0, tp_size: int = 1) -> Any:
    return sgl.HiCacheStorageConfig(
        tp_rank=tp_rank,
        tp_size=tp_size,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=mla,
        enable_storage_metrics=False,
        is_page_first_layout=layout == "page_first",
        model_name="org/interop-model",
        extra_config={"root": root, "key_scheme": "sglang-file"},
    )


def _fill(pool: Any, seed: int) -> None:
    raw = pool.kv_buffer.view(torch.uint8)
    raw.copy_(
        torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    )


def _page(pool: Any, start: int) -> bytes:
    return bytes(pool.get_data_page(start, flat=True).contiguous().view(torch.uint8).numpy())


@pytest.fixture(params=sorted(POOLS))
def pair(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    build, mla = POOLS[request.param]
    pool = build()
    root = str(tmp_path / "cache")
    os.makedirs(root, mode=0o700)
    cfg = _config(root, mla=mla, layout=pool.layout)
    theirs = sgl.HiCacheFile(cfg, file_path=root)
    ours = FileStorage(cfg, {})
    ours.register_mem_pool_host(pool)
    yield pool, theirs, ours, root, mla
    ours.close()


def test_we_read_what_sglang_wrote(pair: Any) -> None:
    pool, theirs, ours, root, mla = pair
    _fill(pool, 1)
    keys = _keys("sglang-wrote")
    src = [i * PAGE_SIZE for i in range(N)]
    assert theirs.batch_set(keys, [pool.get_data_page(s, flat=True) for s in src]) is True
    files = sorted(os.listdir(root))
    suffix = "_org-interop-model" + ("" if mla else "_0_1") + ".bin"  # SGLang's names, flat
    assert sorted(f"{k}{suffix}" for k in keys) == files
    expected = [_page(pool, s) for s in src]
    dst = torch.arange(N * PAGE_SIZE, 2 * N * PAGE_SIZE, dtype=torch.int64)
    assert ours.batch_exists(keys) == N
    assert ours.batch_get_v1(keys, dst) == [True] * N
    assert [_page(pool, int(dst[i * PAGE_SIZE])) for i in range(N)] == expected


def test_sglang_reads_what_we_wrote(pair: Any) -> None:
    pool, theirs, ours, _root, _mla = pair
    _fill(pool, 2)
    keys = _keys("we-wrote")
    src = torch.arange(0, N * PAGE_SIZE, dtype=torch.int64)
    expected = [_page(pool, i * PAGE_SIZE) for i in range(N)]
    assert ours.batch_set_v1(keys, src) == [True] * N
    assert theirs.batch_exists(keys) == N
    got = theirs.batch_get(keys, [pool.get_dummy_flat_data_page() for _ in keys])
    assert all(t is not None for t in got)
    assert [bytes(t.contiguous().view(torch.uint8).numpy()) for t in got] == expected
    # a page SGLang does not have is a miss for both
    assert theirs.batch_exists([*keys[:2], _keys("absent")[0]]) == 2
    assert ours.batch_exists([*keys[:2], _keys("absent")[0]]) == 2
