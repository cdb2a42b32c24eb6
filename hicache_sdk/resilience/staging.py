"""SDK-owned staging memory for deadline-safe I/O.

A read that may outlive its deadline lands in a staging buffer and is copied into the
caller's memory only when it completed in time; a write is snapshotted into a staging
buffer before it is submitted. Either way the abandoned I/O only ever touches memory the
SDK owns, and a staging buffer is returned to the pool only when its I/O has ended.

Buffers are anonymous ``mmap`` regions (page-aligned), rounded up to a power of two (at
least :data:`MIN_BUFFER`) so that they are reused across calls of similar size, and cached
when released. The pool never holds more than ``capacity`` bytes (in use plus cached):
when a request does not fit, cached buffers are unmapped to make room, and if that is not
enough :meth:`StagingPool.acquire` returns ``None`` (the caller fails fast as a miss with
reason ``staging_exhausted``) rather than allocate more.

``register(address, nbytes)`` is called once per newly mapped buffer (Mooncake must
register memory it transfers into); ``unregister(address, nbytes)`` before unmapping one.
A registration failure makes that acquire return ``None``.

:meth:`StagingPool.close` unmaps idle buffers and *leaks* busy ones (an abandoned I/O may
still write into them): they stay mapped, referenced by this module, until their I/O ends
and :meth:`StagingPool.release` is called, which then unmaps them.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from collections.abc import Callable

__all__ = ["MIN_BUFFER", "StagingBuffer", "StagingPool"]

#: The smallest staging buffer mapped.
MIN_BUFFER = 64 << 10

#: Buffers leaked by closed pools while their I/O was still running (kept mapped).
_LEAKED: set[StagingBuffer] = set()
_LEAKED_LOCK = threading.Lock()


class StagingBuffer:
    """One page-aligned, SDK-owned region: ``address`` .. ``address + nbytes``."""

    __slots__ = ("__weakref__", "_arr", "_mm", "address", "nbytes")

    def __init__(self, nbytes: int) -> None:
        self._mm: mmap.mmap | None = mmap.mmap(-1, nbytes)
        self._arr: ctypes.Array[ctypes.c_char] | None = (ctypes.c_char * nbytes).from_buffer(self._mm)
        self.address = ctypes.addressof(self._arr)
        self.nbytes = nbytes

    def _unmap(self) -> None:
        self._arr = None  # drop the export before closing the map
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    @property
    def mapped(self) -> bool:
        return self._mm is not None


def _round_size(nbytes: int, capacity: int) -> int:
    size = MIN_BUFFER
    while size < nbytes:
        size <<= 1
    if size > capacity:  # a power of two would not fit: map exactly (page-rounded)
        page = mmap.PAGESIZE
        size = max(-(-nbytes // page) * page, page)
    return size


class StagingPool:
    """A bounded pool of :class:`StagingBuffer` (thread-safe)."""

    def __init__(
        self,
        capacity: int,
        *,
        register: Callable[[int, int], object] | None = None,
        unregister: Callable[[int, int], object] | None = None,
        on_usage: Callable[[int, int], None] | None = None,
    ) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity!r}")
        self.capacity = capacity
        self._register = register
        self._unregister = unregister
        self._on_usage = on_usage
        self._lock = threading.Lock()
        self._free: dict[int, list[StagingBuffer]] = {}
        self._busy: set[StagingBuffer] = set()
        self._reserved = 0  # bytes mapped by this pool (busy + free)
        self._closed = False

    @property
    def in_use(self) -> int:
        """Bytes of buffers handed out and not yet released."""
        with self._lock:
            return sum(b.nbytes for b in self._busy)

    @property
    def reserved(self) -> int:
        """Bytes mapped by the pool (in use plus cached)."""
        with self._lock:
            return self._reserved

    def acquire(self, nbytes: int) -> StagingBuffer | None:
        """A buffer of at least ``nbytes`` (``nbytes >= 0``), or ``None`` when the pool is
        exhausted, closed, or registration failed."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
        size = _round_size(nbytes, self.capacity)
        victims: list[StagingBuffer] = []
        with self._lock:
            if self._closed or size > self.capacity:
                return None
            bucket = self._free.get(size)
            if bucket:
                buf = bucket.pop()
                self._busy.add(buf)
                self._usage_locked()
                return buf
            # make room by unmapping cached buffers of other sizes
            for sz in sorted(self._free, reverse=True):
                while self._free[sz] and self._reserved + size > self.capacity:
                    v = self._free[sz].pop()
                    self._reserved -= v.nbytes
                    victims.append(v)
            if self._reserved + size > self.capacity:
                return_none = True
            else:
                return_none = False
                self._reserved += size  # reserve before mapping outside the lock
        for v in victims:
            self._free_buffer(v)
        if return_none:
            return None
        try:
            buf = StagingBuffer(size)
        except (OSError, ValueError, MemoryError):
            with self._lock:
                self._reserved -= size
            return None
        if self._register is not None:
            try:
                self._register(buf.address, buf.nbytes)
            except Exception:
                buf._unmap()
                with self._lock:
                    self._reserved -= size
                return None
        with self._lock:
            self._busy.add(buf)
            self._usage_locked()
        return buf

    def release(self, buf: StagingBuffer) -> None:
        """Give back a buffer whose I/O has ended (cached, or unmapped once closed)."""
        with _LEAKED_LOCK:
            leaked = buf in _LEAKED
            _LEAKED.discard(buf)
        if leaked:
            self._free_buffer(buf)
            return
        with self._lock:
            if buf not in self._busy:
                return
            self._busy.discard(buf)
            if self._closed:
                self._reserved -= buf.nbytes
                unmap = True
            else:
                self._free.setdefault(buf.nbytes, []).append(buf)
                unmap = False
            self._usage_locked()
        if unmap:
            self._free_buffer(buf)

    def close(self) -> int:
        """Unmap idle buffers; leak busy ones (their I/O may still write). Returns the
        number of bytes leaked. Idempotent (a second call leaks nothing more)."""
        with self._lock:
            if self._closed:
                return 0
            self._closed = True
            idle = [b for bucket in self._free.values() for b in bucket]
            self._free.clear()
            busy = list(self._busy)
            self._busy.clear()
            self._reserved = 0
            self._usage_locked()
        for b in idle:
            self._free_buffer(b)
        with _LEAKED_LOCK:
            _LEAKED.update(busy)
        return sum(b.nbytes for b in busy)

    def _free_buffer(self, buf: StagingBuffer) -> None:
        if self._unregister is not None and buf.mapped:
            try:
                self._unregister(buf.address, buf.nbytes)
            except Exception:
                pass
        buf._unmap()

    def _usage_locked(self) -> None:
        if self._on_usage is not None:
            self._on_usage(sum(b.nbytes for b in self._busy), self._reserved)
