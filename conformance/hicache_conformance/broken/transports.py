"""Broken transports (memory backend underneath), each failing the transport test named
in its ``FAILS``: the faults seen in the field that the adapter-level suite let through.

Each backend over one is importable as ``hicache_conformance.broken.transports:MemoryWith<Name>``
(``hicache check`` takes that path), and listed in :data:`BROKEN_TRANSPORTS`. The last two,
:class:`GrowsInPlace` (a torn write, as a file written in place) and
:class:`LargeWritesCutShort`, pass every test above the transport: only the transport
tests catch them."""

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
    "GrowsInPlace",
    "LargeWritesCutShort",
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


class GrowsInPlace(MemoryTransport):
    """A torn write: the object is published empty and grows as its bytes are written, a
    chunk at a time (a file written in place under its final name, create-if-absent
    kept: ``open(O_CREAT | O_EXCL)`` then ``write``). A read of the half-written object
    is a miss (its size is wrong) but ``exists`` reports the partial size."""

    FAILS: ClassVar[str] = "test_transport_write_is_never_partially_visible"

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        import numpy as np

        out = []
        for key, segs in zip(keys, buffers):
            with self._store.lock:
                if key in self._store.objects:
                    out.append(True)
                    continue
                self._store.objects[key] = np.zeros(0, dtype=np.uint8)
            done = np.zeros(0, dtype=np.uint8)
            for address, nbytes in segs:
                for off in range(0, nbytes, 65536):  # a chunk per write(), as a file grows
                    n = min(65536, nbytes - off)
                    chunk = np.empty(n, dtype=np.uint8)
                    ctypes.memmove(int(chunk.ctypes.data), address + off, n)
                    done = np.concatenate([done, chunk])
                    with self._store.lock:
                        self._store.objects[key] = done
                    time.sleep(0.0005)
            out.append(True)
        return out


class LargeWritesCutShort(MemoryTransport):
    """A store with a value-size limit that keeps only the first 512 KiB of a larger
    object and reports the write a success (pages of a small model fit: the adapter-level
    tests never see it; a 1 MiB object reads back as a miss)."""

    FAILS: ClassVar[str] = "test_transport_write_is_never_partially_visible"
    LIMIT: ClassVar[int] = 512 * 1024

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        cut: list[Segments] = []
        for segs in buffers:
            left, kept = self.LIMIT, []
            for address, nbytes in segs:
                if left <= 0:
                    break
                kept.append((address, min(nbytes, left)))
                left -= nbytes
            cut.append(kept)
        return super().write(keys, cut)


def _backend(transport_cls: type[MemoryTransport]) -> type[MemoryStorage]:
    def create_transport(self: Any, config: Any) -> MemoryTransport:
        return transport_cls(store=config.store, capacity_bytes=config.capacity_bytes)

    name = f"MemoryWith{transport_cls.__name__}"
    cls = type(name, (MemoryStorage,), {"create_transport": create_transport, "__module__": __name__})
    globals()[name] = cls  # importable as module:Class, for hicache check
    return cls


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
        GrowsInPlace,
        LargeWritesCutShort,
    )
}
