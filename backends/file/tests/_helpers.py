"""Helpers for the file backend tests: buffers as (address, nbytes) segments."""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from pathlib import Path

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def addr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


def segs(a: np.ndarray, parts: int = 1) -> list[tuple[int, int]]:
    """Split a contiguous uint8 array into ``parts`` consecutive segments."""
    n = a.nbytes
    cuts = [n * p // parts for p in range(parts + 1)]
    return [(addr(a) + cuts[p], cuts[p + 1] - cuts[p]) for p in range(parts)]


def pattern(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def listing(root: Path) -> list[str]:
    """Every file under root (relative), hidden ones included."""
    out = []
    for dp, _dn, fn in os.walk(root):
        for f in fn:
            out.append(os.path.relpath(os.path.join(dp, f), root))
    return sorted(out)


def resident_pages(path: Path) -> int:
    """How many of the file's pages the page cache holds: ``mincore`` on a read-only
    mapping (mapping faults nothing in and, unlike an ``RWF_NOWAIT`` read, starts no
    readahead)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        ptr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if ptr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            vec = ctypes.create_string_buffer(-(-size // mmap.PAGESIZE))
            if _libc.mincore(ptr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return sum(b & 1 for b in vec.raw)
        finally:
            _libc.munmap(ptr, size)
    finally:
        os.close(fd)


def evict(path: Path, tries: int = 50) -> bool:
    """Drop ``path`` from the page cache (fsync, then ``POSIX_FADV_DONTNEED``), retried
    until ``mincore`` shows none of it resident. ``False`` when the kernel kept some of it
    (a test that needs a cold read then skips rather than measuring a warm one)."""
    for _ in range(tries):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        if resident_pages(path) == 0:
            return True
        time.sleep(0.01)
    return False
