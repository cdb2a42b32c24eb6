"""Helpers of the paged-adapter tests: pool factories, random pool bytes, a recording
transport."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from hicache_sdk.hostpool import IndexerHostPool, MambaHostPool, MHAHostPool, MLAHostPool, SWAHostPool
from hicache_sdk.memory import MemoryStorage, MemoryTransport
from hicache_sdk.transport import Segments, Transport

MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
MAMBA_LAYOUTS = ("page_first", "page_first_direct")
INDEXER_LAYOUTS = ("layer_first", "page_first", "page_first_direct")

PAGE = 4


def mha(layout: str = "page_first", dtype: torch.dtype = torch.bfloat16, **kw: Any) -> MHAHostPool:
    return MHAHostPool(32, PAGE, 2, 2, 8, dtype=dtype, layout=layout, pin_memory=False, **kw)


def mla(layout: str = "page_first", dtype: torch.dtype = torch.bfloat16, **kw: Any) -> MLAHostPool:
    return MLAHostPool(32, PAGE, 2, 8, 4, dtype=dtype, layout=layout, pin_memory=False, **kw)


def swa(layout: str = "page_first") -> SWAHostPool:
    return SWAHostPool(32, PAGE, 2, 2, 8, dtype=torch.bfloat16, layout=layout, pin_memory=False)


def mamba(layout: str = "page_first") -> MambaHostPool:
    return MambaHostPool(
        8,
        (2, 3),
        [(3, 4), (2, 2)],
        layer_num=2,
        dtype=torch.bfloat16,
        temporal_dtype=torch.float32,
        layout=layout,
        pin_memory=False,
    )


def indexer(layout: str = "page_first") -> IndexerHostPool:
    return IndexerHostPool(32, PAGE, 2, 16, layout=layout, pin_memory=False)


def buffers(pool: Any) -> list[torch.Tensor]:
    buf = pool.kv_buffer
    items = buf if isinstance(buf, (list, tuple)) else [buf]
    return [t for t in items if isinstance(t, torch.Tensor) and t.numel() > 0]


def randomize(pool: Any, seed: int = 0) -> Any:
    """Fill every byte of the pool with random bytes."""
    g = torch.Generator().manual_seed(seed)
    for t in buffers(pool):
        raw = t.view(-1).view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=g))
    return pool


def snapshot(pool: Any) -> list[torch.Tensor]:
    return [t.view(-1).view(torch.uint8).clone() for t in buffers(pool)]


def same_snapshot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def page_bytes(pool: Any, start: int) -> bytes:
    """The flat bytes of the page at slot ``start`` (``get_data_page(flat=True)`` order)."""
    return bytes(pool.get_data_page(int(start), flat=True).contiguous().view(-1).view(torch.uint8).numpy())


def scattered_slots(pool: Any, n_pages: int, seed: int = 0) -> torch.Tensor:
    """Slots of ``n_pages`` distinct pages of the pool, in a random page order (generally
    neither adjacent nor ascending). Does not touch the pool's allocator."""
    ps = pool.page_size
    n_total = pool.size // ps
    assert n_pages <= n_total
    perm = torch.randperm(n_total, generator=torch.Generator().manual_seed(seed))[:n_pages]
    offsets = torch.arange(ps, dtype=torch.int64)
    return (perm[:, None] * ps + offsets[None, :]).reshape(-1)


def hkey(i: int, salt: str = "") -> str:
    """A 64-hex page hash."""
    import hashlib

    return hashlib.sha256(f"{salt}{i}".encode()).hexdigest()


class RecordingTransport(Transport):
    """Delegates to a MemoryTransport and records every call."""

    def __init__(self, inner: Transport, max_segments: int | None = None) -> None:
        self.inner = inner
        self.calls: list[tuple[str, list[str]]] = []
        if max_segments is not None:
            self.max_segments = max_segments  # type: ignore[misc]
        self.fail: BaseException | None = None

    def _rec(self, op: str, keys: Sequence[str]) -> None:
        self.calls.append((op, list(keys)))
        if self.fail is not None and op != "delete":
            raise self.fail

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        self._rec("exists", keys)
        return self.inner.exists(keys)

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self._rec("read", keys)
        for segs in buffers:
            assert len(segs) <= self.max_segments
        return self.inner.read(keys, buffers)

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self._rec("write", keys)
        for segs in buffers:
            assert len(segs) <= self.max_segments
        return self.inner.write(keys, buffers)

    def delete(self, keys: Sequence[str]) -> None:
        self._rec("delete", keys)
        self.inner.delete(keys)

    def clear(self, prefix: str) -> None:
        self._rec("clear", [prefix])
        self.inner.clear(prefix)

    def ops(self, op: str | None = None) -> list[str]:
        return [c[0] for c in self.calls if op is None or c[0] == op]


class RecordingStorage(MemoryStorage):
    """MemoryStorage whose raw transport is a RecordingTransport."""

    max_segments: int | None = None

    def create_transport(self, config: Any) -> Transport:
        inner = MemoryTransport(store=config.store, capacity_bytes=config.capacity_bytes)
        return RecordingTransport(inner, self.max_segments)


StorageFactory = Callable[..., MemoryStorage]
