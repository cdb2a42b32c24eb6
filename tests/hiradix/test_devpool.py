"""Device pool: the contiguous fast path and the gather path move the same bytes; slot accounting."""

from __future__ import annotations

import pytest
import torch

from hicache_sdk.hiradix import CopyFailed, DevicePool


def test_contiguous_and_scattered_loads_are_byte_identical() -> None:
    host = torch.randn(2, 64, 2, 1, 4)
    dev = DevicePool(32, 4, 2, 1, 4, torch.float32, device="cpu")
    contig = torch.arange(8, 24)
    dev.load_from_host(host, contig, torch.arange(16))
    assert torch.equal(dev.kv[:, :16], host[:, 8:24])
    scattered = torch.tensor([40, 41, 42, 43, 4, 5, 6, 7])
    dst = torch.tensor([20, 21, 22, 23, 28, 29, 30, 31])
    dev.load_from_host(host, scattered, dst)
    assert torch.equal(dev.kv[:, dst], host[:, scattered])


def test_alloc_free_and_injected_failure() -> None:
    dev = DevicePool(16, 4, 1, 1, 1, torch.float32, device="cpu")
    a = dev.alloc(8)
    assert a is not None and dev.alloc(12) is None and dev.used_pages() == 2
    dev.free(a)
    with pytest.raises(ValueError, match="double free"):
        dev.free(a)
    with pytest.raises(ValueError, match="multiple of page_size"):
        dev.alloc(3)
    dev.fail_copies = 1
    with pytest.raises(CopyFailed):
        dev.load_from_host(torch.zeros(2, 8, 1, 1, 1), torch.arange(4), torch.arange(4))
    before = dev.kv.clone()
    assert torch.equal(dev.kv, before)
