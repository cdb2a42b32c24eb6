"""page_starts: validation of host indices (every rule, property-tested)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk.hostpool import page_starts


@st.composite
def valid_indices(draw):
    page_size = draw(st.integers(1, 16))
    pool_pages = draw(st.integers(1, 40))
    pages = draw(st.lists(st.integers(0, pool_pages - 1), max_size=12))
    dtype = draw(st.sampled_from([torch.int64, torch.int32]))
    idx = [p * page_size + j for p in pages for j in range(page_size)]
    return torch.tensor(idx, dtype=dtype), page_size, pool_pages * page_size, pages


@given(valid_indices())
def test_valid_indices_give_page_starts(case):
    indices, page_size, pool_size, pages = case
    assert page_starts(indices, page_size, pool_size) == [p * page_size for p in pages]
    assert page_starts(indices, page_size) == [p * page_size for p in pages]


@given(valid_indices(), st.data())
def test_any_single_slot_change_is_rejected(case, data):
    indices, page_size, pool_size, pages = case
    if not pages or page_size == 1:
        return
    pos = data.draw(st.integers(0, indices.numel() - 1))
    delta = data.draw(st.integers(-50, 50).filter(lambda d: d != 0))
    bad = indices.clone()
    bad[pos] += delta
    with pytest.raises(ValueError, match="my_arg"):
        page_starts(bad, page_size, pool_size, arg="my_arg")


@given(valid_indices(), st.integers(1, 5))
def test_wrong_length_is_rejected(case, cut):
    indices, page_size, pool_size, _pages = case
    if page_size == 1 or indices.numel() < cut or cut % page_size == 0:
        return
    with pytest.raises(ValueError, match="host_indices has length"):
        page_starts(indices[:-cut], page_size, pool_size)


@given(st.integers(1, 8), st.integers(1, 10), st.integers(0, 5))
def test_pages_beyond_the_pool_are_rejected(page_size, pool_pages, extra):
    start = (pool_pages + extra) * page_size
    indices = torch.arange(start, start + page_size)
    with pytest.raises(ValueError, match="beyond the pool"):
        page_starts(indices, page_size, pool_pages * page_size)
    assert page_starts(indices, page_size) == [start]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([0, 1, 2, 3], "must be a torch.Tensor"),
        (torch.arange(4, dtype=torch.float32), "dtype int64 or int32"),
        (torch.arange(4, dtype=torch.int16), "dtype int64 or int32"),
        (torch.ones(4, dtype=torch.bool), "dtype int64 or int32"),
        (torch.arange(8).view(2, 4), "must be 1-D"),
        (torch.arange(6), "not a multiple of page_size"),
        (torch.arange(2, 6), "starts at slot 2"),
        (torch.tensor([4, 5, 7, 6]), "not contiguous"),
        (torch.tensor([-4, -3, -2, -1]), "negative"),
        (torch.arange(16, 20), "beyond the pool"),
    ],
)
def test_each_violation_names_the_argument(value, message):
    with pytest.raises(ValueError, match=message) as info:
        page_starts(value, 4, 16, arg="host_indices")
    assert "host_indices" in str(info.value)


def test_bad_page_size_and_pool_size():
    with pytest.raises(ValueError, match="page_size"):
        page_starts(torch.arange(4), 0)
    with pytest.raises(ValueError, match="page_size"):
        page_starts(torch.arange(4), True)
    with pytest.raises(ValueError, match="pool_size"):
        page_starts(torch.arange(4), 4, -1)


def test_empty_and_non_contiguous_tensor_views():
    assert page_starts(torch.empty(0, dtype=torch.int64), 4, 16) == []
    strided = torch.arange(16).view(4, 4)[:, 0].repeat_interleave(1)  # 0, 4, 8, 12
    assert page_starts(strided, 1, 16) == [0, 4, 8, 12]
    view = torch.arange(32)[::2]  # 0, 2, 4, ... (non-contiguous): contiguity is about values
    with pytest.raises(ValueError, match="not contiguous"):
        page_starts(view[:4], 4)
    assert page_starts(torch.arange(8, 16, dtype=torch.int32), 4, 16) == [8, 12]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_indices_rejected():
    with pytest.raises(ValueError, match="CPU"):
        page_starts(torch.arange(4, device="cuda"), 4)
