"""The page-geometry bridge: describe_pool, page_segments, flat_page_view, on our pools and
on duck-typed stand-ins shaped like SGLang's pool objects."""

from __future__ import annotations

import pytest
import torch
from hostpool_cases import CASES, fill_random, read_bytes, tensor_bytes

from hicache_sdk.hostpool import (
    IndexerHostPool,
    MambaHostPool,
    MHAHostPool,
    MLAHostPool,
    PoolLayout,
    SWAHostPool,
    describe_pool,
    flat_page_view,
    has_page_segments,
    page_segments,
)
from hicache_sdk.spec import PoolName


def _meta_per_page(pool, starts):
    out = []
    for s in starts:
        ptrs, sizes = pool.get_page_buffer_meta(torch.arange(s, s + pool.page_size))
        out.append(list(zip(ptrs, sizes)))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_page_segments_equal_get_page_buffer_meta(case):
    pool = CASES[case]()
    layout = describe_pool(pool, "kv")
    ps = pool.page_size
    n_pages = pool.size // ps
    starts = [p * ps for p in (n_pages - 1, 0, 2, 1, 2)]
    assert page_segments(pool, layout, starts) == _meta_per_page(pool, starts)
    ptrs, sizes = pool.get_page_buffer_meta(torch.cat([torch.arange(s, s + ps) for s in starts]))
    flat = [seg for page in page_segments(pool, layout, starts) for seg in page]
    assert flat == list(zip(ptrs, sizes))
    assert layout.segment_sizes == tuple(sizes[: len(layout.segment_sizes)])
    assert page_segments(pool, layout, []) == []


def test_describe_mha_layer_first():
    pool = MHAHostPool(16, 4, 3, 2, 8, layout="layer_first")
    layout = describe_pool(pool, PoolName.KV)
    assert layout == PoolLayout(
        name="kv",
        kind="mha",
        layout="layer_first",
        dtype="bfloat16",
        page_size=4,
        segment_sizes=(4 * 2 * 8 * 2,) * 6,
        flat_order=(0, 2, 4, 1, 3, 5),
        geometry=(("head_dim", 8), ("head_num", 2), ("layer_num", 3), ("v_head_dim", 8)),
        rank_replicated=False,
        has_buffer=True,
    )


@pytest.mark.parametrize(
    ("factory", "kind", "dtype", "replicated", "segments"),
    [
        (lambda: MHAHostPool(16, 4, 3, 2, 8), "mha", "bfloat16", False, (3 * 4 * 2 * 8 * 2,) * 2),
        (
            lambda: MHAHostPool(16, 4, 3, 2, 8, v_head_dim=4, dtype=torch.float16),
            "mha",
            "float16",
            False,
            (384, 192),
        ),
        (lambda: SWAHostPool(16, 4, 1, 1, 4, dtype=torch.float32), "swa", "float32", False, (64, 64)),
        (
            lambda: MLAHostPool(16, 4, 3, 12, 4, layout="layer_first"),
            "mla",
            "bfloat16",
            True,
            (4 * 16 * 2,) * 3,
        ),
        (lambda: IndexerHostPool(16, 4, 2, 6), "indexer", "uint8", True, (2 * 4 * 6,)),
        (
            lambda: MambaHostPool(4, (2, 3), [(4,)], layer_num=2, temporal_dtype=torch.float32),
            "mamba",
            "bfloat16,temporal=float32",
            False,
            (2 * 6 * 4, 2 * 4 * 2),
        ),
        (
            lambda: MambaHostPool(4, (2,), [(4,)], layer_num=1, dtype=torch.float32),
            "mamba",
            "float32",
            False,
            (8, 16),
        ),
    ],
)
def test_describe_kinds(factory, kind, dtype, replicated, segments):
    pool = factory()
    layout = describe_pool(pool, "x")
    assert (layout.kind, layout.dtype, layout.rank_replicated, layout.segment_sizes) == (
        kind,
        dtype,
        replicated,
        segments,
    )
    assert layout.flat_order == tuple(range(len(segments)))
    assert layout.has_buffer
    assert describe_pool(pool, "x", rank_replicated=not replicated).rank_replicated is (not replicated)


def test_describe_geometry_separates_pools_whose_bytes_differ():
    a = describe_pool(MambaHostPool(4, (2, 3), [(4,)], layer_num=2), "mamba")
    b = describe_pool(MambaHostPool(4, (3, 2), [(4,)], layer_num=2), "mamba")
    assert a.page_bytes == b.page_bytes and a.fingerprint() != b.fingerprint()
    assert ("temporal_dim0", 2) in a.geometry and ("conv_0_dim0", 4) in a.geometry
    c = describe_pool(MHAHostPool(16, 4, 2, 2, 8), "kv")
    d = describe_pool(MHAHostPool(16, 4, 2, 4, 4), "kv")
    assert c.segment_sizes == d.segment_sizes and c.fingerprint() != d.fingerprint()


@pytest.mark.parametrize("cls", [MHAHostPool, MLAHostPool])
def test_describe_logical_anchor(cls):
    pool = cls(16, 4, 2, 8, 4, logical=True)
    layout = describe_pool(pool, "kv")
    assert layout.has_buffer is False
    assert layout.segment_sizes == () and layout.flat_order == () and layout.page_bytes == 0
    with pytest.raises(ValueError, match="no buffer"):
        page_segments(pool, layout, [0])
    assert flat_page_view(pool, layout, 0) is None


def test_describe_rejects_non_pools():
    with pytest.raises(ValueError, match="pool"):
        describe_pool(object(), "kv")


# -- flat_page_view -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case", ["mla-page_first", "mla-page_first_direct", "indexer-page_first", "mha-ps1-page_first_direct"]
)
def test_flat_page_view_when_contiguous(case):
    pool = CASES[case]()
    fill_random(pool, seed=3)
    layout = describe_pool(pool, "kv")
    start = 2 * pool.page_size
    view = flat_page_view(pool, layout, start)
    if case.startswith("mha"):
        assert view is None  # K and V of a page are half a buffer apart
        return
    assert view is not None and view.dtype == torch.uint8
    assert tensor_bytes(view) == tensor_bytes(pool.get_data_page(start))
    view.fill_(7)
    assert bool((pool.get_data_page(start).view(torch.uint8) == 7).all())


@pytest.mark.parametrize("case", ["mha-page_first", "mha-layer_first", "mla-layer_first", "mamba-page_first"])
def test_flat_page_view_none_when_scattered(case):
    pool = CASES[case]()
    assert flat_page_view(pool, describe_pool(pool, "kv"), pool.page_size) is None


# -- SGLang-shaped stand-ins (duck typing only) ---------------------------------------------------


class MLATokenToKVPoolHost:
    """Carries only attribute names SGLang's MLA host pool has (wrapping our buffer)."""

    def __init__(self, inner: MLAHostPool) -> None:
        for attr in (
            "size",
            "page_size",
            "page_num",
            "layout",
            "dtype",
            "kv_buffer",
            "layer_num",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "kv_cache_dim",
        ):
            setattr(self, attr, getattr(inner, attr))
        self._inner = inner

    def get_page_buffer_meta(self, indices):
        return self._inner.get_page_buffer_meta(indices)

    def get_dummy_flat_data_page(self):
        return self._inner.get_dummy_flat_data_page()


class LogicalHostPool:
    """SGLang's DeepSeek-V4 anchor: no buffer, meta None."""

    def __init__(self) -> None:
        self.size, self.page_size, self.layout, self.dtype = 64, 16, "page_first", torch.uint8
        self.kv_buffer = None
        self.layer_num = 0

    def get_page_buffer_meta(self, indices):
        return None


class DSAIndexerPoolHost:
    """Indexer whose meta raises for layer_first, as SGLang's does."""

    def __init__(self) -> None:
        self.size, self.page_size, self.layout, self.dtype = 16, 4, "layer_first", torch.uint8
        self.indexer_dtype = torch.uint8
        self.index_k_with_scale_buffer = torch.zeros(2, 5, 24, dtype=torch.uint8)
        self.layer_num = 2

    def get_page_buffer_meta(self, indices):
        raise ValueError("Unsupported layout: layer_first")

    def get_dummy_flat_data_page(self):
        return torch.zeros(48, dtype=torch.uint8)


class ScatteredPool:
    """A pool whose pages are not at base + page * stride (meta is a lookup table)."""

    def __init__(self) -> None:
        self.size, self.page_size, self.layout, self.dtype = 12, 3, "page_first", torch.float32
        self.buf = torch.zeros(4, 3, dtype=torch.float32)
        self.kv_buffer = self.buf
        self.order = [2, 0, 3, 1]

    def get_page_buffer_meta(self, indices):
        pages = [int(i) // 3 for i in indices[::3].tolist()]
        return [self.buf[self.order[p]].data_ptr() for p in pages], [12] * len(pages)


def test_describe_sglang_shaped_mla():
    inner = MLAHostPool(16, 4, 2, 12, 4, layout="page_first_direct")
    duck = MLATokenToKVPoolHost(inner)
    layout = describe_pool(duck, "kv")
    assert layout == describe_pool(inner, "kv")
    assert layout.kind == "mla" and layout.rank_replicated
    assert page_segments(duck, layout, [0, 8]) == _meta_per_page(inner, [0, 8])
    fill_random(inner, seed=4)
    view = flat_page_view(duck, layout, 4)
    assert view is not None and tensor_bytes(view) == tensor_bytes(inner.get_data_page(4))


def test_describe_sglang_logical_anchor():
    layout = describe_pool(LogicalHostPool(), PoolName.KV)
    assert (layout.has_buffer, layout.kind, layout.segment_sizes, layout.page_size) == (
        False,
        "other",
        (),
        16,
    )


def test_describe_pool_without_zero_copy_meta():
    pool = DSAIndexerPoolHost()
    layout = describe_pool(pool, PoolName.INDEXER)
    assert (layout.kind, layout.segment_sizes, layout.flat_order, layout.rank_replicated) == (
        "indexer",
        (48,),
        (0,),
        True,
    )
    assert has_page_segments(pool) is False
    with pytest.raises(ValueError, match="zero-copy"):
        page_segments(pool, layout, [0])
    assert flat_page_view(pool, layout, 0) is None


def test_page_segments_falls_back_when_not_linear():
    pool = ScatteredPool()
    layout = describe_pool(pool, "kv")
    starts = [9, 0, 6, 3]
    expect = [[(pool.buf[pool.order[s // 3]].data_ptr(), 12)] for s in starts]
    assert page_segments(pool, layout, starts) == expect


def test_page_segments_rejects_stale_layout():
    pool = MHAHostPool(16, 4, 2, 2, 8)
    other = describe_pool(MHAHostPool(16, 4, 3, 2, 8), "kv")
    with pytest.raises(ValueError, match="segment sizes"):
        page_segments(pool, other, [0])


def test_page_segments_read_the_right_bytes():
    pool = MHAHostPool(32, 8, 2, 2, 4, layout="page_head")
    fill_random(pool, seed=5)
    layout = describe_pool(pool, "kv")
    for start, segs in zip([8, 24], page_segments(pool, layout, [8, 24])):
        joined = b"".join(read_bytes(*segs[j]) for j in layout.flat_order)
        assert joined == tensor_bytes(pool.get_data_page(start))


class MambaPoolHost:
    """Carries only attribute names SGLang's Mamba host pool has (no ``layer_num``)."""

    def __init__(self, inner: MambaHostPool) -> None:
        for attr in (
            "size",
            "page_size",
            "layout",
            "dtype",
            "conv_dtype",
            "temporal_dtype",
            "num_mamba_layers",
            "temporal_buffer",
            "conv_buffer",
            "kv_buffer",
            "conv_state_shapes",
        ):
            setattr(self, attr, getattr(inner, attr))
        self.temporal_state_shape = torch.Size(inner.temporal_state_shape)
        self._inner = inner

    def get_page_buffer_meta(self, indices):
        return self._inner.get_page_buffer_meta(indices)


def test_describe_sglang_shaped_mamba_matches_ours():
    inner = MambaHostPool(5, (2, 3), [(4,), (2, 2)], layer_num=2, temporal_dtype=torch.float32)
    duck = MambaPoolHost(inner)
    ours = describe_pool(inner, PoolName.MAMBA)
    assert describe_pool(duck, PoolName.MAMBA) == ours
    assert ours.fingerprint() == describe_pool(duck, "mamba").fingerprint()
    assert page_segments(duck, ours, [0, 5, 3]) == _meta_per_page(inner, [0, 5, 3])
