"""Broken transports (memory backend underneath), each failing the transport test named
in its ``FAILS``: the faults seen in the field that the adapter-level suite let through."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from hicache_sdk import Segments
from hicache_sdk.memory import MemoryStorage, MemoryTransport

__all__ = [
    "ShortReadIsTrue",
    "WriteReplaces",
    "DuplicateLastWins",
    "MissRaises",
    "WritePartiallyVisible",
    "ReadsComeBackShort",
    "BROKEN_TRANSPORTS",
]


class ShortReadIsTrue(MemoryTransport):
    """``read`` copies what there is of a short object and returns True."""

    FAILS: ClassVar[str] = "test_transport_wrong_size_object_is_never_read"

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        out = []
        for key, segs in zip(keys, buffers):
            with self._store.lock:
                arr = self._store.objects.get(key)
            if arr is None:
                out.append(False)
                continue
            src, left = int(arr.ctypes.data), int(arr.nbytes)
            for address, nbytes in segs:
                n = min(nbytes, left)
                ctypes.memmove(address, src, n)
                src, left = src + n, left - n
            out.append(True)
        return out


class WriteReplaces(MemoryTransport):
    """``write`` replaces an existing object (no create-if-absent)."""

    FAILS: ClassVar[str] = "test_transport_write_never_replaces_an_object"

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self.delete(list(dict.fromkeys(keys)))
        out = []
        for key, segs in zip(keys, buffers):
            self.delete([key])
            out += super().write([key], [segs])
        return out


class DuplicateLastWins(MemoryTransport):
    """Create-if-absent across batches, but within one batch the last copy of a key wins
    (a parallel writer whose later publish lands first)."""

    FAILS: ClassVar[str] = "test_transport_duplicate_keys_in_one_batch"

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        out = super().write(list(reversed(keys)), list(reversed(buffers)))
        return list(reversed(out))


class MissRaises(MemoryTransport):
    """A missing object raises instead of reporting False."""

    FAILS: ClassVar[str] = "test_transport_miss_is_false_not_an_error"

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        with self._store.lock:
            missing = [k for k in keys if k not in self._store.objects]
        if missing:
            raise KeyError(missing[0])
        return super().read(keys, buffers)


class WritePartiallyVisible(MemoryTransport):
    """``write`` publishes the object first, then fills it (readers can see zeros)."""

    FAILS: ClassVar[str] = "test_transport_write_is_never_partially_visible"

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        import numpy as np

        out = []
        for key, segs in zip(keys, buffers):
            total = sum(n for _, n in segs)
            arr = np.zeros(total, dtype=np.uint8)
            with self._store.lock:
                if key in self._store.objects:
                    out.append(True)
                    continue
                self._store.objects[key] = arr
            dst = int(arr.ctypes.data)
            for address, nbytes in segs:
                for off in range(0, nbytes, 65536):  # slowly, yielding between chunks
                    n = min(65536, nbytes - off)
                    ctypes.memmove(dst + off, address + off, n)
                    time.sleep(0.001)
                dst += nbytes
            out.append(True)
        return out


class ReadsComeBackShort(MemoryTransport):
    """Every read fills only the first half of each buffer and reports True (a read loop
    that stops after one short ``recv``)."""

    FAILS: ClassVar[str] = "test_transport_round_trip_is_byte_exact"

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        out = []
        for key, segs in zip(keys, buffers):
            with self._store.lock:
                arr = self._store.objects.get(key)
            total = sum(n for _, n in segs)
            if arr is None or int(arr.nbytes) != total:
                out.append(False)
                continue
            src, left = int(arr.ctypes.data), total // 2
            for address, nbytes in segs:
                n = min(nbytes, left)
                ctypes.memmove(address, src, n)
                src, left = src + n, left - n
            out.append(True)
        return out


def _backend(transport_cls: type[MemoryTransport]) -> type[MemoryStorage]:
    def create_transport(self: Any, config: Any) -> MemoryTransport:
        return transport_cls(store=config.store, capacity_bytes=config.capacity_bytes)

    return type(
        f"MemoryWith{transport_cls.__name__}", (MemoryStorage,), {"create_transport": create_transport}
    )


#: Backend class (memory backend over the broken transport) -> the test it must fail.
BROKEN_TRANSPORTS: dict[str, tuple[type[MemoryStorage], str]] = {
    t.__name__: (_backend(t), t.FAILS)
    for t in (
        ShortReadIsTrue,
        WriteReplaces,
        DuplicateLastWins,
        MissRaises,
        WritePartiallyVisible,
        ReadsComeBackShort,
    )
}
