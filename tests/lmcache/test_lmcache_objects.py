"""Chunk objects with their layout record (``hicache_sdk.lmcache.objects``), over the
in-process memory transport (no LMCache needed), with two segments per object and with a
one-segment transport (one staging copy)."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import pytest
import torch

from hicache_sdk.lmcache.objects import Chunk, ChunkObjects, layout_identity
from hicache_sdk.memory import MemoryTransport, drop_store
from hicache_sdk.metrics.backend import Metrics
from hicache_sdk.paged.header import TRAILER_SIZE

BF16 = layout_identity([(64,)], ["bfloat16"], "KV_2LTD")
FP16 = layout_identity([(64,)], ["float16"], "KV_2LTD")


class OneSegment(MemoryTransport):
    max_segments: ClassVar[int] = 1


@pytest.fixture(params=[MemoryTransport, OneSegment], ids=["two-segments", "one-segment"])
def objects(request: pytest.FixtureRequest) -> Any:
    store = f"lmc-{uuid.uuid4().hex}"
    t = request.param(store)
    yield ChunkObjects(t, Metrics(), checksum=True)
    t.close()
    drop_store(store)


def _chunk(name: str, t: torch.Tensor, ident: bytes = BF16) -> Chunk:
    """A chunk over ``t``'s memory (the caller keeps ``t`` alive while it is used)."""
    return Chunk(name, t.data_ptr(), t.numel() * t.element_size(), ident)


def test_store_load_layout_and_size(objects: ChunkObjects) -> None:
    src = torch.arange(128, dtype=torch.uint8)
    ok, created = objects.store([_chunk("a", src), _chunk("a", src), _chunk("b", src)])
    assert ok and created == [True, False, True]
    assert objects.sizes(["a", "c"]) == [128 + TRAILER_SIZE, None]
    assert objects.store([_chunk("a", src)]) == (True, [False])
    dst = torch.zeros(128, dtype=torch.uint8)
    assert objects.load([_chunk("a", dst), _chunk("c", dst)]) == [True, False]
    assert torch.equal(dst, src)
    same_size, smaller = torch.zeros(128, dtype=torch.uint8), torch.zeros(64, dtype=torch.uint8)
    assert objects.load([_chunk("a", same_size, FP16)]) == [False]
    assert objects.load([_chunk("a", smaller)]) == [False]
    assert objects.metrics.snapshot()["counters"]["layout_mismatch"] == 1
    assert objects.present(["a", "a", "c"], [128, 64, None]) == [True, False, False]
    assert objects.sizes(["a"]) == [128 + TRAILER_SIZE]  # misses never cost the chunk


def test_a_corrupt_record_is_a_miss_and_deleted(objects: ChunkObjects) -> None:
    src = torch.arange(128, dtype=torch.uint8)
    assert objects.store([_chunk("x", src)])[0]
    raw = torch.zeros(128 + TRAILER_SIZE, dtype=torch.uint8)
    assert objects.transport.read(["x"], [[(raw.data_ptr(), raw.numel())]]) == [True]
    raw[5] ^= 0xFF  # a payload byte: the checksum fails
    objects.transport.delete(["x"])
    assert objects.transport.write(["x"], [[(raw.data_ptr(), raw.numel())]]) == [True]
    dst = torch.zeros(128, dtype=torch.uint8)
    assert objects.load([_chunk("x", dst)]) == [False]
    assert objects.sizes(["x"]) == [None]
    assert objects.metrics.snapshot()["counters"]["integrity_deleted"] == 1
