"""Object compatibility with the REAL SGLang 0.5.23 ``MooncakeStore`` against one real
``mooncake_master`` (plus a separate holder process, so every read crosses processes):
with ``key_scheme = "sglang-mooncake"`` our Mooncake backend reads the pages SGLang's
MooncakeStore wrote and SGLang's reads ours, byte-exact, on SGLang's own host pools (MHA
page_first; MLA page_first and layer_first, the latter as Mooncake multi-buffer objects),
for tp rank 0 of 1 and rank 1 of 2 (the rank suffix in the object names), with and
without a model name. The object names are checked too, out of band, with a raw
Mooncake client. Collected only in ``tox -e sglang``."""

from __future__ import annotations

import hashlib
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore
from sglang_pools import PAGE_SIZE, POOLS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backends" / "mooncake" / "tests"))
os.environ.setdefault("MC_LOG_LEVEL", "ERROR")

from _servers import MooncakeCluster
from hicache_backend_mooncake import MooncakeStorage
from mooncake.store import MooncakeDistributedStore

N = 5
#: (pool, tp_rank, tp_size, model name). SGLang's MooncakeStore refuses MHA layer_first.
CASES = [
    ("mha-page_first", 0, 1, "org/interop-model"),
    ("mha-page_first", 1, 2, "org/interop-model"),
    ("mha-page_first", 0, 1, ""),
    ("mla-page_first", 0, 1, "org/interop-model"),
    ("mla-layer_first", 0, 2, "org/interop-model"),
]


@pytest.fixture(scope="module")
def cluster(mooncake_cluster: MooncakeCluster) -> MooncakeCluster:
    """The session's cluster (``sglang_servers.py``), shared with test_sglang_backends.py."""
    return mooncake_cluster


@pytest.fixture(scope="module")
def raw(cluster: MooncakeCluster) -> Iterator[Any]:
    """A raw Mooncake client of the same cluster: the out-of-band view."""
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", cluster.address) == 0
    yield s
    s.close()


def _keys(salt: str) -> list[str]:
    return [hashlib.sha256(f"{salt}-{i}".encode()).hexdigest() for i in range(N)]


def _fill(pool: Any, seed: int) -> None:
    raw = pool.kv_buffer.view(torch.uint8)
    raw.copy_(
        torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    )


def _page(pool: Any, start: int) -> bytes:
    return bytes(pool.get_data_page(start, flat=True).contiguous().view(torch.uint8).numpy())


def _names(tag: str, model: str, keys: list[str], mla: bool, tp_rank: int) -> list[str]:
    """SGLang 0.5.23's object names, written out from its source (not from our schemes)."""
    prefix = "_".join(p for p in (tag, model.replace("/", "-")) if p)
    if mla:
        return [f"{prefix}_{k}__k" for k in keys]
    return [f"{prefix}_{k}_{tp_rank}_{kv}" for k in keys for kv in "kv"]


@pytest.fixture(
    params=CASES, ids=[f"{c[0]}-tp{c[1]}of{c[2]}-{'model' if c[3] else 'nomodel'}" for c in CASES]
)
def pair(request: pytest.FixtureRequest, cluster: MooncakeCluster) -> Iterator[Any]:
    name, tp_rank, tp_size, model = request.param
    build, mla = POOLS[name]
    pool = build()
    tag = f"interop{uuid.uuid4().hex[:10]}"
    extra = cluster.config(extra_backend_tag=tag, key_scheme="sglang-mooncake")
    cfg = sgl.HiCacheStorageConfig(
        tp_rank=tp_rank,
        tp_size=tp_size,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=mla,
        enable_storage_metrics=False,
        is_page_first_layout=pool.layout == "page_first",
        model_name=model,
        extra_config=extra,
    )
    theirs = MooncakeStore(cfg, pool)
    theirs.register_mem_pool_host(pool)
    ours = MooncakeStorage(cfg, {})
    ours.register_mem_pool_host(pool)
    yield pool, theirs, ours, _names(tag, model, [], mla, tp_rank), (tag, model, mla, tp_rank)
    ours.close()
    theirs.close()


def _present(raw: Any, names: list[str]) -> list[int]:
    return list(raw.batch_is_exist(names))


def test_we_read_what_sglang_wrote(pair: Any, raw: Any) -> None:
    pool, theirs, ours, _, (tag, model, mla, tp_rank) = pair
    _fill(pool, 1)
    keys = _keys(f"sglang-wrote-{tag}")
    src = torch.arange(0, N * PAGE_SIZE, dtype=torch.int64)
    expected = [_page(pool, i * PAGE_SIZE) for i in range(N)]
    assert theirs.batch_set_v1(keys, src) == [True] * N
    names = _names(tag, model, keys, mla, tp_rank)
    assert _present(raw, names) == [1] * len(names), "SGLang's objects are not under the names we expect"
    dst = torch.arange(N * PAGE_SIZE, 2 * N * PAGE_SIZE, dtype=torch.int64)
    assert ours.batch_exists(keys) == N
    assert ours.batch_get_v1(keys, dst) == [True] * N
    assert [_page(pool, int(dst[i * PAGE_SIZE])) for i in range(N)] == expected
    # a page SGLang does not have is a miss for us too, and ends the prefix
    absent = _keys(f"absent-{tag}")[0]
    assert ours.batch_exists([*keys[:2], absent, keys[3]]) == 2


def test_sglang_reads_what_we_wrote(pair: Any, raw: Any) -> None:
    pool, theirs, ours, _, (tag, model, mla, tp_rank) = pair
    _fill(pool, 2)
    keys = _keys(f"we-wrote-{tag}")
    src = torch.arange(0, N * PAGE_SIZE, dtype=torch.int64)
    expected = [_page(pool, i * PAGE_SIZE) for i in range(N)]
    assert ours.batch_set_v1(keys, src) == [True] * N
    names = _names(tag, model, keys, mla, tp_rank)
    assert _present(raw, names) == [1] * len(names), "our objects are not under SGLang's names"
    assert theirs.batch_exists(keys) == N
    pool.kv_buffer.view(torch.uint8).zero_()
    assert theirs.batch_get_v1(keys, src) == [True] * N
    assert [_page(pool, i * PAGE_SIZE) for i in range(N)] == expected
    absent = _keys(f"absent-{tag}")[0]
    assert theirs.batch_exists([*keys[:2], absent]) == 2
