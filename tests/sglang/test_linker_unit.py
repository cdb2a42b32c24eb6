"""The SGLang-free parts of the linker (run everywhere): its settings, the device-pool
view, the object byte ranges of each layer, and the staging ring over the ``memory``
backend with a duck-typed CPU device pool."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from hicache_sdk.errors import ConfigError
from hicache_sdk.memory import MemoryStorage
from hicache_sdk.sglang.linker import DeviceKVView, LinkerSettings, layer_ranges
from hicache_sdk.sglang.linker.group import LogicalKVAnchor, PoolEntryView
from hicache_sdk.sglang.linker.staging import StagingRing
from hicache_sdk.sglang.linker.view import layer_groups
from hicache_sdk.spec import HiCacheStorageConfig

LAYERS, HEADS, DIM, PAGE = 3, 2, 8, 4


def _mha(rows: int = 32, seed: int = 1) -> Any:
    gen = torch.Generator().manual_seed(seed)

    def buf() -> torch.Tensor:
        return torch.randint(-50, 50, (rows, HEADS, DIM), generator=gen).to(torch.bfloat16)

    return SimpleNamespace(
        k_buffer=[buf() for _ in range(LAYERS)],
        v_buffer=[buf() for _ in range(LAYERS)],
        dtype=torch.bfloat16,
        layer_num=LAYERS,
        head_num=HEADS,
        head_dim=DIM,
        v_head_dim=DIM,
    )


def test_settings() -> None:
    s = LinkerSettings.from_mapping({"backend": "file", "backend_config": {"root": "/x"}, "staging_pages": 8})
    assert (s.backend, dict(s.backend_config), s.staging_pages, s.ranged_reads, s.staging) == (
        "file",
        {"root": "/x"},
        8,
        None,
        None,
    )
    for bad, why in (
        ({}, "must name a hicache-sdk backend"),
        ({"backend": "file", "nope": 1}, "unknown keys \\['nope'\\]"),
        ({"backend": "file", "backend_config": []}, "must be a JSON object"),
        ({"backend": "file", "tp_rank": -1}, "tp_rank"),
        ({"backend": "file", "ranged_reads": "yes"}, "ranged_reads"),
        ({"backend": "file", "staging_pages": 0}, "staging_pages"),
    ):
        with pytest.raises(ConfigError, match=why):
            LinkerSettings.from_mapping(bad)


def test_view_segments_and_layer_ranges() -> None:
    pool = _mha()
    view = DeviceKVView(pool, PAGE)
    row = HEADS * DIM * 2
    assert view.hicache_pool_kind == "mha" and view.size == 32 and view.layer_num == LAYERS
    ptrs, sizes = view.get_page_buffer_meta(torch.arange(4, 8))
    want = [t.data_ptr() + 4 * row for pair in zip(pool.k_buffer, pool.v_buffer) for t in pair]
    assert ptrs == want and sizes == [PAGE * row] * (2 * LAYERS)  # k0, v0, k1, v1, ...
    # in the object: every K layer, then every V layer
    seg = PAGE * row
    assert layer_ranges(view) == [[(i * seg, seg), ((LAYERS + i) * seg, seg)] for i in range(LAYERS)]
    with pytest.raises(ValueError, match="starts at slot 1"):
        view.get_page_buffer_meta(torch.arange(1, 5))
    with pytest.raises(ConfigError, match="neither a plain MHA pool"):
        DeviceKVView(SimpleNamespace(kv_buffer=[torch.zeros(8, 1, 4)], dtype=torch.float32), PAGE)
    scaled = _mha()
    scaled.k_scale_buffer = [torch.zeros(32, 1)]
    with pytest.raises(ConfigError, match="holds buffers beside its per-layer KV \\(k_scale_buffer"):
        DeviceKVView(scaled, PAGE)
    dsa = SimpleNamespace(
        kv_buffer=[torch.zeros(8, 1, 4)], kv_lora_rank=2, index_k_with_scale_buffer=[torch.zeros(2, 8)]
    )
    with pytest.raises(
        ConfigError, match="index_k_with_scale_buffer: a scaled or quantized KV cache, or a DSA"
    ):
        DeviceKVView(dsa, PAGE)


def test_layer_groups_double_after_layer_zero() -> None:
    def spans(n: int) -> list[tuple[int, int]]:
        return [(g.start, g.stop) for g in layer_groups(n)]

    assert spans(1) == [(0, 1)]
    assert spans(3) == [(0, 1), (1, 2), (2, 3)]
    assert spans(32) == [(0, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, 32)]
    assert spans(33)[-1] == (32, 33)
    for n in range(1, 70):  # every layer once, in order
        assert [layer for g in layer_groups(n) for layer in g] == list(range(n))


def test_staging_ring_round_trip() -> None:
    """Pages through the ring (2 pages a half, a batch of 3): offload, then load into
    other rows; every layer is complete only with its bytes in place."""
    pool = _mha(seed=3)
    view = DeviceKVView(pool, PAGE)
    ring = StagingRing(pool, view, pages=2)
    store = MemoryStorage(HiCacheStorageConfig(model_name="unit"), {"store": "linker-unit"})
    try:
        store.register_mem_pool_host(ring.mirror)
        keys = [hashlib.sha256(f"ring-{i}".encode()).hexdigest() for i in range(3)]
        src_rows, dst_rows = torch.arange(4, 16), torch.arange(16, 28)
        assert ring.offload(store, keys, src_rows, None) is True
        done: list[int] = []

        def complete(index: int, layer: int) -> None:
            k, v = view.layers[layer]
            assert torch.equal(k[dst_rows], k[src_rows]) and torch.equal(v[dst_rows], v[src_rows]), layer
            done.append(layer)

        ring.load(store, SimpleNamespace(complete=complete), 0, keys, dst_rows)
        assert done == list(range(LAYERS))
        with pytest.raises(OSError, match="did not load"):
            ring.load(store, SimpleNamespace(complete=complete), 1, [keys[0], "f" * 64], torch.arange(16, 24))
    finally:
        store.close()


def test_pool_entry_view_with_page_rows_through_the_ring() -> None:
    """A view of one entry of SGLang's pool group whose rows are whole pages (an indexer):
    a page is each buffer's row of that page, in order; through the staging ring (pool
    ``indexer``) its pages move row by row, into other pages."""
    gen = torch.Generator().manual_seed(5)
    bufs = [torch.randint(0, 256, (6, 24), dtype=torch.uint8, generator=gen) for _ in range(2)]
    view = PoolEntryView("indexer", [bufs], PAGE, PAGE, kind="indexer", geometry={"layer_num": 2})
    assert (view.size, view.layer_num, view.dtype, view.hicache_pool_kind) == (24, 2, torch.uint8, "indexer")
    ptrs, sizes = view.get_page_buffer_meta(torch.arange(8, 16))
    assert ptrs == [b.data_ptr() + r * 24 for r in (2, 3) for b in bufs] and sizes == [24] * 4
    with pytest.raises(ValueError, match="slots beyond the pool"):
        view.get_page_buffer_meta(torch.arange(24, 28))
    with pytest.raises(ConfigError, match="a row holds 2 slots"):
        PoolEntryView("indexer", [bufs], PAGE, 2)
    ring = StagingRing(None, view, pages=1, name="indexer")
    store = MemoryStorage(HiCacheStorageConfig(model_name="unit"), {"store": "linker-unit-entry"})
    try:
        store.register_mem_pool_host(LogicalKVAnchor(PAGE, torch.device("cpu")))
        store.register_mem_host_pool_v2(ring.mirror, "indexer")
        keys = [hashlib.sha256(f"entry-{i}".encode()).hexdigest() for i in range(2)]
        want = [b[1:3].clone() for b in bufs]
        assert ring.offload(store, keys, torch.arange(4, 12), None) is True
        for b in bufs:
            b.zero_()
        ring.load(store, SimpleNamespace(), 0, keys, torch.arange(12, 20), complete=False)
        assert all(torch.equal(b[3:5], w) for b, w in zip(bufs, want))
        assert not any(b[1:3].any() for b in bufs)
    finally:
        store.close()
