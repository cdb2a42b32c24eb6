"""Host pools: buffer shapes, flat pages, meta pointers, alloc/free, pinned memory."""

from __future__ import annotations

import pytest
import torch
from hostpool_cases import CASES, SYMMETRIC, fill_random, read_bytes, tensor_bytes

from hicache_sdk.hostpool import IndexerHostPool, MambaHostPool, MHAHostPool, MLAHostPool, SWAHostPool


def _page_index_tensor(pool, page: int) -> torch.Tensor:
    return torch.arange(page * pool.page_size, (page + 1) * pool.page_size, dtype=torch.int64)


# -- geometry (SGLang 0.5.23 facts) ---------------------------------------------------------


def test_page_num_reserves_one_padding_page():
    pool = MHAHostPool(64, 16, 2, 2, 8)
    assert (pool.page_num, pool.size) == (5, 80)
    pool = MHAHostPool(70, 16, 2, 2, 8)
    assert (pool.page_num, pool.size) == (5, 80)
    assert MambaHostPool(6, (2,), [(3,)], layer_num=1).size == 7


@pytest.mark.parametrize(
    ("layout", "dims"),
    [
        ("layer_first", (2, 3, 24, 2, 8)),
        ("page_first", (2, 24, 3, 2, 8)),
        ("page_first_direct", (2, 6, 3, 4, 2, 8)),
        ("page_head", (2, 6, 2, 4, 3, 8)),
    ],
)
def test_mha_kv_buffer_dims(layout, dims):
    pool = MHAHostPool(20, 4, 3, 2, 8, layout=layout)
    assert tuple(pool.kv_buffer.shape) == dims
    assert pool.k_buffer.data_ptr() == pool.kv_buffer.data_ptr()
    assert pool.v_buffer.data_ptr() == pool.kv_buffer[1].data_ptr()
    assert pool.get_size_per_token() == 16 * 2 * 3 * 2
    assert pool.get_ksize_per_token() == 8 * 2 * 3 * 2
    assert pool.kv_buffer.dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("layout", "dims"),
    [
        ("layer_first", (3, 24, 1, 16)),
        ("page_first", (24, 3, 1, 16)),
        ("page_first_direct", (6, 3, 4, 1, 16)),
    ],
)
def test_mla_kv_buffer_dims(layout, dims):
    pool = MLAHostPool(20, 4, 3, 12, 4, layout=layout)
    assert pool.kv_cache_dim == 16
    assert tuple(pool.kv_buffer.shape) == dims
    assert pool.get_size_per_token() == pool.get_ksize_per_token() == 16 * 2 * 3


def test_asymmetric_mha_has_separate_k_and_v():
    pool = MHAHostPool(16, 4, 2, 2, 8, v_head_dim=4, layout="page_first_direct")
    assert tuple(pool.k_buffer.shape) == (5, 2, 4, 2, 8)
    assert tuple(pool.v_buffer.shape) == (5, 2, 4, 2, 4)
    assert pool.get_size_per_token() == (8 + 4) * 2 * 2 * 2
    assert pool.get_ksize_per_token() == 8 * 2 * 2 * 2
    with pytest.raises(NotImplementedError):
        pool.get_data_page(0)
    with pytest.raises(NotImplementedError):
        pool.get_dummy_flat_data_page()
    with pytest.raises(ValueError, match="layout"):
        MHAHostPool(16, 4, 2, 2, 8, v_head_dim=4, layout="layer_first")


def test_mamba_buffers_and_sizes():
    pool = MambaHostPool(6, (2, 3), [(4,), (2, 2)], layer_num=2, temporal_dtype=torch.float32)
    assert pool.page_size == 1
    assert tuple(pool.temporal_buffer.shape) == (7, 2, 1, 2, 3)
    assert [tuple(b.shape) for b in pool.conv_buffer] == [(7, 2, 1, 4), (7, 2, 1, 2, 2)]
    assert pool.temporal_buffer.dtype == torch.float32 and pool.conv_buffer[0].dtype == torch.bfloat16
    assert pool.get_size_per_token() == 2 * (6 * 4 + 4 * 2 + 4 * 2)
    ptrs, sizes = pool.get_page_buffer_meta(torch.tensor([3]))
    assert sizes == [2 * 6 * 4, 2 * 4 * 2, 2 * 4 * 2]
    assert ptrs == [
        pool.temporal_buffer[3].data_ptr(),
        pool.conv_buffer[0][3].data_ptr(),
        pool.conv_buffer[1][3].data_ptr(),
    ]


def test_mamba_without_temporal_state_omits_it_from_meta():
    pool = MambaHostPool(4, (0,), [(3, 2)], layer_num=3, dtype=torch.float16)
    ptrs, sizes = pool.get_page_buffer_meta(torch.tensor([1, 2]))
    assert sizes == [3 * 6 * 2] * 2
    assert ptrs == [pool.conv_buffer[0][1].data_ptr(), pool.conv_buffer[0][2].data_ptr()]
    assert len(pool.kv_buffer) == 1


def test_indexer_buffer_and_meta():
    pool = IndexerHostPool(8, 4, 3, 5)
    assert tuple(pool.index_k_with_scale_buffer.shape) == (3, 3, 1, 20)
    ptrs, sizes = pool.get_page_buffer_meta(torch.arange(4, 12))
    assert sizes == [3 * 20, 3 * 20]
    assert ptrs == [
        pool.index_k_with_scale_buffer[1].data_ptr(),
        pool.index_k_with_scale_buffer[2].data_ptr(),
    ]


def test_mha_meta_pointer_order_matches_sglang():
    pool = MHAHostPool(8, 2, 2, 1, 4, dtype=torch.float32, layout="layer_first")
    ptrs, sizes = pool.get_page_buffer_meta(torch.tensor([4, 5]))
    kv = pool.kv_buffer
    assert ptrs == [
        kv[0, 0, 4].data_ptr(),
        kv[1, 0, 4].data_ptr(),
        kv[0, 1, 4].data_ptr(),
        kv[1, 1, 4].data_ptr(),
    ]
    assert sizes == [2 * 4 * 4] * 4
    pool = MHAHostPool(8, 2, 2, 1, 4, dtype=torch.float32, layout="page_first")
    ptrs, sizes = pool.get_page_buffer_meta(torch.tensor([4, 5, 0, 1]))
    kv = pool.kv_buffer
    assert ptrs == [kv[0, 4].data_ptr(), kv[1, 4].data_ptr(), kv[0, 0].data_ptr(), kv[1, 0].data_ptr()]
    assert sizes == [2 * 2 * 4 * 4] * 4


def test_split_heads_meta_page_head():
    pool = MHAHostPool(8, 2, 2, 4, 4, dtype=torch.float32, layout="page_head")
    ptrs, sizes = pool.get_split_heads_page_buffer_meta(torch.tensor([2, 3]), 2)
    kv = pool.kv_buffer
    assert ptrs == [
        kv[0, 1, 0].data_ptr(),
        kv[1, 1, 0].data_ptr(),
        kv[0, 1, 2].data_ptr(),
        kv[1, 1, 2].data_ptr(),
    ]
    assert sizes == [2 * 2 * 2 * 4 * 4] * 4
    with pytest.raises(ValueError, match="split_factor"):
        pool.get_split_heads_page_buffer_meta(torch.tensor([2, 3]), 3)


# -- flat pages -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", SYMMETRIC)
def test_flat_page_is_meta_segments_in_flat_order(case):
    from hicache_sdk.hostpool import describe_pool

    pool = CASES[case]()
    fill_random(pool, seed=1)
    layout = describe_pool(pool, "kv")
    for page in (0, 1, pool.size // pool.page_size - 1):
        ptrs, sizes = pool.get_page_buffer_meta(_page_index_tensor(pool, page))
        joined = b"".join(read_bytes(ptrs[j], sizes[j]) for j in layout.flat_order)
        flat = pool.get_data_page(page * pool.page_size, flat=True)
        assert tensor_bytes(flat) == joined
        dummy = pool.get_dummy_flat_data_page()
        assert dummy.numel() * dummy.element_size() == len(joined) == layout.page_bytes
        assert not bool(dummy.view(torch.uint8).any())


@pytest.mark.parametrize("case", SYMMETRIC)
def test_set_from_flat_data_page_round_trip(case):
    pool = CASES[case]()
    fill_random(pool, seed=2)
    ps = pool.page_size
    before_other = tensor_bytes(pool.get_data_page(0))
    source = pool.get_data_page(2 * ps).clone()
    fresh = torch.randint(0, 256, (source.numel() * source.element_size(),), dtype=torch.uint8)
    pool.set_from_flat_data_page(ps, fresh)  # raw bytes are accepted
    assert tensor_bytes(pool.get_data_page(ps)) == fresh.numpy().tobytes()
    pool.set_from_flat_data_page(ps, source)  # the pool's own dtype too
    assert tensor_bytes(pool.get_data_page(ps)) == tensor_bytes(source)
    assert tensor_bytes(pool.get_data_page(0)) == before_other
    with pytest.raises(ValueError, match="data_page"):
        pool.set_from_flat_data_page(ps, torch.zeros(3, dtype=torch.uint8))


def test_layer_first_flat_page_is_k_then_v():
    pool = MHAHostPool(4, 2, 2, 1, 2, dtype=torch.float32, layout="layer_first")
    pool.kv_buffer.copy_(torch.arange(pool.kv_buffer.numel(), dtype=torch.float32).view_as(pool.kv_buffer))
    flat = pool.get_data_page(2)
    expect = torch.cat([pool.kv_buffer[kv, layer, 2:4].flatten() for kv in (0, 1) for layer in (0, 1)])
    assert torch.equal(flat, expect)


# -- logical anchors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "factory",
    [lambda: MHAHostPool(16, 4, 2, 2, 8, logical=True), lambda: MLAHostPool(16, 4, 2, 8, 4, logical=True)],
)
def test_logical_pool_has_no_buffer(factory):
    pool = factory()
    assert pool.kv_buffer is None
    assert pool.get_page_buffer_meta(torch.arange(4)) is None
    assert pool.get_data_page(0).numel() == 0
    assert pool.get_dummy_flat_data_page().numel() == 0
    assert pool.get_size_per_token() == 0
    pool.set_from_flat_data_page(0, torch.empty(0, dtype=torch.uint8))
    assert pool.alloc(8) is not None


# -- alloc / free -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case", ["mha-page_first", "mla-layer_first", "mamba-page_first", "indexer-page_first"]
)
def test_alloc_returns_whole_aligned_pages_until_exhausted(case):
    pool = CASES[case]()
    ps = pool.page_size
    got = []
    while (idx := pool.alloc(2 * ps if pool.available_size() >= 2 * ps else ps)) is not None:
        assert idx.dtype == torch.int64 and idx.numel() % ps == 0
        pages = idx.view(-1, ps)
        assert bool((pages[:, 0] % ps == 0).all())
        assert torch.equal(pages - pages[:, :1], torch.arange(ps).expand_as(pages))
        got.append(idx)
    allslots = torch.cat(got)
    assert sorted(allslots.tolist()) == list(range(pool.size))
    assert pool.available_size() == 0
    assert pool.alloc(ps) is None
    assert pool.free(got[0]) == got[0].numel()
    again = pool.alloc(got[0].numel())
    assert sorted(again.tolist()) == sorted(got[0].tolist())


def test_alloc_zero_and_bad_sizes():
    pool = MHAHostPool(16, 4, 1, 1, 4)
    assert pool.alloc(0).numel() == 0
    for bad in (3, -4, 4.0, True):
        with pytest.raises(ValueError, match="need_size"):
            pool.alloc(bad)
    assert pool.alloc(pool.size + 4) is None


def test_free_rejects_double_free_and_partial_pages():
    pool = MHAHostPool(16, 4, 1, 1, 4)
    idx = pool.alloc(8)
    assert pool.free(idx[:4]) == 4
    with pytest.raises(ValueError, match="double free"):
        pool.free(idx[:4])
    with pytest.raises(ValueError, match="double free"):
        pool.free(idx)  # half of it is already free: nothing changes
    assert pool.free(idx[4:]) == 4
    other = pool.alloc(4)
    with pytest.raises(ValueError, match="indices"):
        pool.free(other[:2])
    with pytest.raises(ValueError, match="indices"):
        pool.free(torch.cat([other, other]))
    with pytest.raises(ValueError, match="indices"):
        pool.free(torch.tensor([40, 41, 42, 43]))
    assert pool.free(torch.empty(0, dtype=torch.int64)) == 0


def test_free_list_reuse_after_many_cycles():
    pool = MLAHostPool(32, 4, 1, 4, 0)
    held = [pool.alloc(4) for _ in range(pool.page_num)]
    assert pool.alloc(4) is None
    for idx in held[::2]:
        pool.free(idx)
    regained = pool.alloc(4 * len(held[::2]))
    assert sorted(regained.tolist()) == sorted(torch.cat(held[::2]).tolist())


# -- constructor checks and pinned memory ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"size": 0}, "size"),
        ({"page_size": 0}, "page_size"),
        ({"layer_num": -1}, "layer_num"),
        ({"head_num": 1.5}, "head_num"),
        ({"layout": "page_unified"}, "layout"),
        ({"dtype": "bfloat16"}, "dtype"),
        ({"pin_memory": "yes"}, "pin_memory"),
    ],
)
def test_constructor_rejects_bad_args(kwargs, arg):
    base = {"size": 16, "page_size": 4, "layer_num": 1, "head_num": 1, "head_dim": 4}
    with pytest.raises(ValueError, match=arg):
        MHAHostPool(**{**base, **kwargs})


def test_sidecar_constructor_checks():
    with pytest.raises(ValueError, match="conv_shapes"):
        MambaHostPool(4, (2,), [(1, -1)], layer_num=1)
    with pytest.raises(ValueError, match="temporal_shape"):
        MambaHostPool(4, 2, [(1,)], layer_num=1)
    with pytest.raises(ValueError, match="layout"):
        MambaHostPool(4, (2,), [(1,)], layer_num=1, layout="layer_first")
    with pytest.raises(ValueError, match="index_dim"):
        IndexerHostPool(4, 2, 1, 0)
    assert isinstance(SWAHostPool(8, 2, 1, 1, 4), MHAHostPool)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_pin_memory_off_without_cuda():
    pool = MHAHostPool(8, 4, 1, 1, 4)
    assert pool.pin_memory is False
    assert not pool.kv_buffer.is_pinned()
    with pytest.raises(ValueError, match="pin_memory"):
        MHAHostPool(8, 4, 1, 1, 4, pin_memory=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pin_memory_on_with_cuda():
    pool = MHAHostPool(8, 4, 1, 1, 4)
    assert pool.pin_memory is True and pool.kv_buffer.is_pinned()
    mamba = MambaHostPool(4, (2,), [(3,)], layer_num=1)
    assert mamba.temporal_buffer.is_pinned() and mamba.conv_buffer[0].is_pinned()
    assert not MLAHostPool(8, 4, 1, 4, 0, pin_memory=False).kv_buffer.is_pinned()


def test_page_buffer_element_size():
    assert MHAHostPool(16, 4, 3, 2, 8).get_page_buffer_element_size() == 3 * 4 * 2 * 8 * 2
    assert (
        MHAHostPool(16, 4, 3, 4, 8, layout="page_head").get_page_buffer_element_size(2) == 3 * 4 * 2 * 8 * 2
    )
    assert MLAHostPool(16, 4, 3, 8, 4, logical=True).get_page_buffer_element_size() is None
    with pytest.raises(ValueError, match="split_factor"):
        MLAHostPool(16, 4, 3, 8, 4).get_page_buffer_element_size(2)


def test_free_accepts_int32_indices():
    pool = MHAHostPool(16, 4, 1, 1, 4)
    idx = pool.alloc(8)
    assert pool.free(idx.to(torch.int32)) == 8
    assert pool.available_size() == pool.size


def test_alloc_free_is_thread_safe():
    import threading

    pool = MHAHostPool(256, 4, 1, 1, 4)
    held: list[torch.Tensor] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(200):
            idx = pool.alloc(8)
            if idx is not None:
                with lock:
                    held.append(idx)
            with lock:
                victim = held.pop(0) if len(held) > 4 else None
            if victim is not None:
                pool.free(victim)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slots = torch.cat(held).tolist() if held else []
    assert len(slots) == len(set(slots))
    assert pool.available_size() + len(slots) == pool.size
