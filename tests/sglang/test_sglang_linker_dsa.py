"""``TransportLinker`` on DSA and DeepSeek V4 models, inside the REAL SGLang 0.5.23
(collected only in ``tox -e sglang``).

Their views come from SGLang's own pool-view builder (``resolve_hybrid_device_pool_group``):
each physical pool of the group (the DSA KV pool and its indexer; DeepSeek V4's SWA,
compressed, indexer and state pools) is stored beside the others under its own name. Each
linker is built by SGLang's factory (``create_unified_cache_linker(..., backend="dynamic")``)
over SGLang's real CPU pools and the file backend; bytes are compared buffer by buffer.
"""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hicache_conformance.linker_contract import offloaded
from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang_linker_stand import build, linker_config, page_keys, slots, swa_transfers, transfer

from hicache_sdk.bench.linker import fill_buffers
from hicache_sdk.errors import ConfigError

#: DSA needs 64-token pages (its indexer's physical page); DeepSeek V4 256-token pages.
DSA_PAGE, V4_PAGE = 64, 256
DSA_LAYERS = 2


def dsa_pool(seed: int | None = None) -> Any:
    """SGLang's real CPU ``DSATokenToKVPool`` (an MLA pool of 2 layers with an indexer
    beside it: one page row of 128-dim keys and their scales per layer), 4 pages and a
    padding page, random bytes from ``seed`` (else zeros)."""
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool

    pool = DSATokenToKVPool(
        size=4 * DSA_PAGE,
        page_size=DSA_PAGE,
        kv_lora_rank=16,
        dtype=torch.bfloat16,
        qk_rope_head_dim=8,
        layer_num=DSA_LAYERS,
        device="cpu",
        index_head_dim=128,
        enable_memory_saver=False,
        kv_cache_dim=24,
        index_buf_size=4 * DSA_PAGE,
    )
    fill_buffers([*pool.kv_buffer, *pool.index_k_with_scale_buffer], seed)
    return pool


def dsa_page(pool: Any, page: int) -> list[bytes]:
    """Every layer's KV rows of ``page``, then every layer's indexer row of it."""
    rows = slots(page, 1, DSA_PAGE)
    kv = [bytes(b[rows].contiguous().view(torch.uint8).numpy()) for b in pool.kv_buffer]
    index = [bytes(b[page].contiguous().numpy()) for b in pool.index_k_with_scale_buffer]
    return kv + index


@pytest.fixture
def cfg(tmp_path: Path) -> dict[str, Any]:
    return {"root": str(tmp_path)}


def test_dsa_model_offload_lookup_and_load(cfg: dict[str, Any], tmp_path: Path) -> None:
    """A DSA model: the KV pages and the indexer pages are both stored (``kv`` and
    ``indexer``); a length is restorable only with its indexer pages too; a load restores
    both, byte for byte, and completes every layer."""
    model = f"org/dsa-{uuid.uuid4().hex[:8]}"
    pool = dsa_pool(seed=101)
    linker = build(pool, linker_config("file", cfg), model=model, page_size=DSA_PAGE)
    try:
        assert sorted(map(str, linker.pools)) == ["indexer", "kv"] and linker.group is not None
        assert linker.num_layers == DSA_LAYERS and linker._ranged is None and "kv+indexer" in repr(linker)
        keys = page_keys(3)
        want = [dsa_page(pool, 1 + i) for i in range(3)]
        assert linker.offload(transfer(keys, slots(1, 3, DSA_PAGE))) is True
        assert offloaded(linker, 1) == [True]
        fill_buffers([*pool.kv_buffer, *pool.index_k_with_scale_buffer], None)  # the device pool is cleared
        assert linker.lookup("r", transfer(keys, None)) == [1, 2, 3]

        assert linker.load("r", transfer(keys, slots(0, 3, DSA_PAGE))) is True
        assert dsa_page(pool, 0) != want[0]  # only queued
        index = linker.start_layer_wise_loading()
        counter = linker.layer_done_counter
        counter.set_consumer(index)
        counter.wait_until(DSA_LAYERS - 1)
        assert linker.finish_layer_wise_loading(index) is True
        assert [dsa_page(pool, i) for i in range(3)] == want

        # the indexer object of page 2 gone: a length of 2 or more is not restorable,
        # and a load of it fails, without raising
        gone = [p for p in tmp_path.rglob(f"{keys[1]}*") if p.parent.parent.name.startswith("indexer-")]
        assert len(gone) == 1
        gone[0].unlink()
        assert linker.lookup("r", transfer(keys, None)) == [1]
        assert linker.load("m", transfer(keys[:2], slots(2, 2, DSA_PAGE))) is True
        assert linker.finish_layer_wise_loading(linker.start_layer_wise_loading()) is False
        with pytest.raises(
            ValueError, match="serves the pools \\['kv'\\] here, got transfers for \\['swa'\\]"
        ):
            linker.load(
                "x", [*transfer(keys, slots(0, 3, DSA_PAGE)), PoolTransfer(name=PoolName.SWA, keys=keys)]
            )
    finally:
        linker.close()


def test_dsa_pages_are_written_by_rank_zero_through_the_ring(cfg: dict[str, Any]) -> None:
    """SGLang marks the DSA group rank-replicated: TP rank 0 writes every pool, another
    rank stores nothing and reports success, and reads rank 0's pages. Through the host
    staging ring too (what CUDA pools use; the indexer's rows are whole pages), a ring
    smaller than the batch."""
    model = f"org/dsa-tp-{uuid.uuid4().hex[:8]}"
    src, dst = dsa_pool(seed=102), dsa_pool()
    rank1 = build(src, linker_config("file", cfg, tp_rank=1, tp_size=2), model=model, page_size=DSA_PAGE)
    rank0 = build(src, linker_config("file", cfg, tp_rank=0, tp_size=2), model=model, page_size=DSA_PAGE)
    reader = build(
        dst,
        linker_config("file", cfg, tp_rank=1, tp_size=2, staging=True, staging_pages=1),
        model=model,
        page_size=DSA_PAGE,
    )
    try:
        keys = page_keys(2)
        assert rank1.offload(transfer(keys, slots(2, 2, DSA_PAGE))) is True
        assert offloaded(rank1, 1) == [True]
        assert rank0.lookup("t", transfer(keys, None)) == []  # rank 1 stored nothing
        assert rank0.offload(transfer(keys, slots(2, 2, DSA_PAGE))) is True
        assert offloaded(rank0, 1) == [True]
        assert sorted(reader._rings) == ["indexer", "kv"]
        assert reader.lookup("t", transfer(keys, None)) == [1, 2]
        assert reader.load("t", transfer(keys, slots(0, 2, DSA_PAGE))) is True
        assert reader.finish_layer_wise_loading(reader.start_layer_wise_loading()) is True
        assert [dsa_page(dst, i) for i in range(2)] == [dsa_page(src, 2 + i) for i in range(2)]
        # and the ring's offload reads back without it
        other = page_keys(1)
        assert reader.offload(transfer(other, slots(3, 1, DSA_PAGE))) is True  # rank 1: stores nothing
        assert offloaded(reader, 1) == [True]
        assert rank0.lookup("o", transfer(other, None)) == []
    finally:
        for linker in (rank1, rank0, reader):
            linker.close()


@pytest.fixture
def sglang_runtime() -> Iterator[None]:
    """SGLang's runtime context, which its DeepSeek V4 pool reads when built: SGLang's own
    test helper publishes a default configuration for the test and restores it after."""
    from sglang.srt.runtime_context import get_context

    with get_context().override_server_args():
        yield


def v4_pool(seed: int | None = None) -> Any:
    """SGLang's real CPU ``DeepSeekV4TokenToKVPool`` of a 3-layer model (compression
    ratios 0, 4 and 128: an SWA pool on every layer, C4 KV with its indexer and states on
    layer 1, C128 KV on layer 2), random bytes from ``seed`` (else zeros)."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool

    pool = DeepSeekV4TokenToKVPool(
        max_num_reqs=2,
        swa_size=2 * V4_PAGE,
        c4_size=2 * V4_PAGE,
        c128_size=16,
        c4_state_pool_size=64,
        c128_state_pool_size=8,
        page_size=V4_PAGE,
        swa_page_size=V4_PAGE,
        dtype=torch.float8_e4m3fn,
        c4_state_dtype=torch.float32,
        c128_state_dtype=torch.float32,
        qk_nope_head_dim=448,
        qk_rope_head_dim=64,
        indexer_head_dim=128,
        layer_num=3,
        device="cpu",
        enable_memory_saver=False,
        compression_ratios=[0, 4, 128],
        sliding_window=128,
        start_layer=0,
        end_layer=3,
    )
    return pool


def entry_bytes(linker: Any, name: str, page: int) -> bytes:
    """The bytes of ``page`` (a page of the entry's source pool) in one entry of the
    linker's SGLang pool group, as SGLang's own entry addresses them."""
    entry = next(e for e in linker.group.entries if str(e.name.value) == name)
    ptrs, sizes = entry.get_page_buffer_meta(slots(page, 1, V4_PAGE))
    return b"".join(ctypes.string_at(p, n) for p, n in zip(ptrs, sizes))


@pytest.mark.usefixtures("sglang_runtime")
def test_deepseek_v4_model_offload_lookup_and_load(cfg: dict[str, Any]) -> None:
    """A DeepSeek V4 model: no KV pool of its own (a logical anchor); its compressed pools
    take the KV pages' slots (``ALL_PAGES``), its SWA and compress-state pools the SWA
    window's (``TRAILING_PAGES``); every pool is stored under its name, a length needs
    its window's SWA and state pages, and a load restores every pool byte for byte."""
    model = f"org/v4-{uuid.uuid4().hex[:8]}"
    components = {ComponentType.FULL, ComponentType.SWA, ComponentType.C128}
    pool = v4_pool()
    linker = build(pool, linker_config("file", cfg), model=model, components=components, page_size=V4_PAGE)
    try:
        names = sorted(map(str, (e.name.value for e in linker.group.entries)))
        assert names == [
            "deepseek_v4_c128",
            "deepseek_v4_c4",
            "deepseek_v4_c4_indexer",
            "deepseek_v4_c4_indexer_state",
            "deepseek_v4_c4_state",
            "swa",
        ]
        fill_buffers([b for e in linker.group.entries for b in e.kv_buffer], 103)
        kv_names = [
            n for n in names if n not in ("swa", "deepseek_v4_c4_state", "deepseek_v4_c4_indexer_state")
        ]
        swa_names = sorted(set(names) - set(kv_names))
        keys = page_keys(2)
        want_kv = {n: [entry_bytes(linker, n, 1 + i) for i in range(2)] for n in kv_names}
        want_swa = {n: entry_bytes(linker, n, 2) for n in swa_names}
        assert (
            linker.offload(swa_transfers(keys, slots(1, 2, V4_PAGE), keys[1:], slots(2, 1, V4_PAGE))) is True
        )
        assert offloaded(linker, 1) == [True]
        fill_buffers([b for e in linker.group.entries for b in e.kv_buffer], None)
        assert linker.lookup("r", swa_transfers(keys, None, keys[1:], None)) == [2]
        assert linker.lookup("r", swa_transfers(keys[:1], None, keys[:1], None)) == []  # no window at 1
        assert linker.lookup("r", transfer(keys, None)) == []  # the SWA component's transfer is needed

        assert (
            linker.load("r", swa_transfers(keys, slots(3, 2, V4_PAGE), keys[1:], slots(0, 1, V4_PAGE)))
            is True
        )
        index = linker.start_layer_wise_loading()
        linker.layer_done_counter.set_consumer(index)
        linker.layer_done_counter.wait_until(linker.num_layers - 1)
        assert linker.finish_layer_wise_loading(index) is True
        assert {n: [entry_bytes(linker, n, 3 + i) for i in range(2)] for n in kv_names} == want_kv
        assert {n: entry_bytes(linker, n, 0) for n in swa_names} == want_swa
    finally:
        linker.close()


def test_refusals_name_the_model(cfg: dict[str, Any]) -> None:
    """Components SGLang's builder does not pair with a DSA pool are refused when SGLang
    builds the linker, named."""
    good = linker_config("file", cfg)
    with pytest.raises(ConfigError, match="DSATokenToKVPool with components \\['FULL', 'SWA'\\]"):
        build(
            dsa_pool(),
            good,
            model="m",
            components={ComponentType.FULL, ComponentType.SWA},
            page_size=DSA_PAGE,
        )
