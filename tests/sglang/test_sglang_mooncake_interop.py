"""Object compatibility with the REAL SGLang 0.5.23 ``MooncakeStore`` against one real
``mooncake_master`` (plus a separate holder process, so every read crosses processes):
with ``key_scheme = "sglang-mooncake"`` our Mooncake backend reads the pages SGLang's
MooncakeStore wrote and SGLang's reads ours, byte-exact, on SGLang's own host pools (MHA
page_first; MLA page_first and layer_first, the latter as Mooncake multi-buffer objects),
for tp rank 0 of 1 and rank 1 of 2 (the rank suffix in the object names), with and
without a model name. Both are built from one config in SGLang's keys only (no
``master_metrics_port``, against a master whose metrics port is not SGLang's default 9003;
and once with ``check_server`` and the right port). The object names are checked too, out
of band, with a raw Mooncake client; under another prefix (tag or model) or the ``default``
key scheme ours finds none of SGLang's pages. Collected only in ``tox -e sglang``."""

from __future__ import annotations

import copy
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
#: (pool, tp_rank, tp_size, model name, check_server). SGLang's MooncakeStore refuses MHA
#: layer_first.
CASES = [
    ("mha-page_first", 0, 1, "org/interop-model", False),
    ("mha-page_first", 1, 2, "org/interop-model", False),
    ("mha-page_first", 0, 1, "", False),
    ("mla-page_first", 0, 1, "org/interop-model", False),
    ("mla-layer_first", 0, 2, "org/interop-model", False),
    ("mla-page_first", 0, 1, "org/interop-model", True),
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


def _sglang_config(cluster: MooncakeCluster, tag: str, check_server: bool) -> dict[str, Any]:
    """SGLang's keys only (plus our ``key_scheme``, which SGLang ignores)."""
    extra = cluster.config(extra_backend_tag=tag, key_scheme="sglang-mooncake")
    assert "master_metrics_port" not in extra and cluster.metrics_port != 9003
    if check_server:
        extra.update(check_server=True, master_metrics_port=cluster.metrics_port)
    return extra


@pytest.fixture(
    params=CASES,
    ids=[
        f"{c[0]}-tp{c[1]}of{c[2]}-{'model' if c[3] else 'nomodel'}{'-check_server' if c[4] else ''}"
        for c in CASES
    ],
)
def pair(request: pytest.FixtureRequest, cluster: MooncakeCluster) -> Iterator[Any]:
    name, tp_rank, tp_size, model, check_server = request.param
    build, mla = POOLS[name]
    pool = build()
    tag = f"interop{uuid.uuid4().hex[:10]}"
    extra = _sglang_config(cluster, tag, check_server)
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


def _ours(cfg: Any, pool: Any, **extra: Any) -> MooncakeStorage:
    other = copy.copy(cfg)
    other.extra_config = {**cfg.extra_config, **extra}
    st = MooncakeStorage(other, {})
    st.register_mem_pool_host(pool)
    return st


def test_only_the_same_prefix_and_scheme_read_sglangs_pages(cluster: MooncakeCluster) -> None:
    """SGLang's pages are found by ours only under ``sglang-mooncake`` with the same
    ``extra_backend_tag`` and model (the key prefix); another tag, another model or the
    ``default`` key scheme sees none of them."""
    build, _ = POOLS["mha-page_first"]
    pool = build()
    tag = f"prefix{uuid.uuid4().hex[:10]}"
    cfg = sgl.HiCacheStorageConfig(
        tp_rank=0,
        tp_size=1,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=False,
        enable_storage_metrics=False,
        is_page_first_layout=True,
        model_name="org/prefix-model",
        extra_config=_sglang_config(cluster, tag, False),
    )
    theirs = MooncakeStore(cfg, pool)
    theirs.register_mem_pool_host(pool)
    _fill(pool, 3)
    keys = _keys(f"prefix-{tag}")
    assert theirs.batch_set_v1(keys, torch.arange(0, N * PAGE_SIZE, dtype=torch.int64)) == [True] * N
    same = _ours(cfg, pool)
    other_tag = _ours(cfg, pool, extra_backend_tag=tag + "x")
    other_model = _ours(cfg, pool, model_name="org/prefix-model-2")
    default = _ours(cfg, pool, key_scheme="default")
    try:
        assert same.batch_exists(keys) == N
        assert [other_tag.batch_exists(keys), other_model.batch_exists(keys), default.batch_exists(keys)] == [
            0,
            0,
            0,
        ]
    finally:
        for st in (same, other_tag, other_model, default):
            st.close()
        theirs.close()
