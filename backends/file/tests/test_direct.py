"""O_DIRECT reads of uncached pages (``direct_io``) and the bulk fast paths of ``exists``."""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _helpers import evict, resident_pages
from hicache_backend_file import FileTransport, vio
from hicache_backend_file.names import check_names
from hypothesis import given
from hypothesis import strategies as st

Make = Callable[..., FileTransport]
PAGE = 64 * 1024
TAIL = 96  # an unaligned trailer after the aligned payload, as the default key scheme writes


def _arena(nbytes: int) -> tuple[mmap.mmap, int]:
    m = mmap.mmap(-1, nbytes)  # page-aligned anonymous memory
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


def _evict(root: Path, name: str) -> None:
    if not evict(root / name):
        pytest.skip(f"the kernel kept {name} cached after POSIX_FADV_DONTNEED: no cold read to test")


def _o_direct_works(root: Path) -> bool:
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    os.close(fd)
    probe = root / "probe"
    probe.write_bytes(b"x" * 4096)
    try:
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


def _write_pages(t: FileTransport, names: list[str], data: np.ndarray) -> None:
    src = data.ctypes.data
    size = PAGE + TAIL
    assert t.write(names, [[(src + i * size, size)] for i in range(len(names))]) == [True] * len(names)


def test_cold_aligned_read_uses_o_direct_and_is_exact(make_transport: Make, root: Path) -> None:
    t = make_transport()
    if not _o_direct_works(root):
        pytest.skip("no O_DIRECT on this file system")
    names = [f"p/{i:02x}/page{i}" for i in range(4)]
    data = np.random.default_rng(1).integers(0, 256, (PAGE + TAIL) * 4, dtype=np.uint8)
    _write_pages(t, names, data)
    for n in names:
        _evict(root, n)
    arena, base = _arena(4 * PAGE + 4096)
    tails = np.zeros(4 * TAIL, dtype=np.uint8)
    bufs = [[(base + i * PAGE, PAGE), (tails.ctypes.data + i * TAIL, TAIL)] for i in range(4)]
    assert [resident_pages(root / n) for n in names] == [0] * 4
    assert t.read(names, bufs) == [True] * 4
    got = np.frombuffer(arena, dtype=np.uint8, count=4 * PAGE).reshape(4, PAGE)
    want = data.reshape(4, PAGE + TAIL)
    assert (got == want[:, :PAGE]).all()
    assert (tails.reshape(4, TAIL) == want[:, PAGE:]).all()
    assert t.direct_bytes() == 4 * PAGE, f"O_DIRECT still enabled: {t._direct}"
    del got
    arena.close()


def test_unaligned_or_cached_or_disabled_reads_are_buffered(make_transport: Make, root: Path) -> None:
    t = make_transport()
    off = make_transport(direct_io=False)
    names = ["a", "b"]
    data = np.random.default_rng(2).integers(0, 256, (PAGE + TAIL) * 2, dtype=np.uint8)
    _write_pages(t, names, data)
    # cached: served by the RWF_NOWAIT read, no O_DIRECT
    out = np.zeros_like(data)
    size = PAGE + TAIL
    assert t.read(names, [[(out.ctypes.data + i * size, size)] for i in range(2)]) == [True, True]
    assert (out == data).all() and t.direct_bytes() == 0
    # cold but unaligned destination (address + 1): buffered
    for n in names:
        _evict(root, n)
    raw = np.zeros(2 * size + 4097, dtype=np.uint8)
    a = raw.ctypes.data
    start = a + (-a % 4096) + 1
    assert t.read(names, [[(start + i * size, size)] for i in range(2)]) == [True, True]
    view = np.ctypeslib.as_array((ctypes.c_uint8 * (2 * size)).from_address(start))
    assert (view == data).all() and t.direct_bytes() == 0
    # disabled
    for n in names:
        _evict(root, n)
    arena, base = _arena(2 * PAGE + 4096)
    tails = np.zeros(2 * TAIL, dtype=np.uint8)
    bufs = [[(base + i * PAGE, PAGE), (tails.ctypes.data + i * TAIL, TAIL)] for i in range(2)]
    assert off.read(names, bufs) == [True, True]
    assert off.direct_bytes() == 0
    arena.close()


def test_aligned_prefix() -> None:
    A = vio.DIO_ALIGN
    assert vio.aligned_prefix([(A, A), (2 * A, 2 * A), (5 * A, 96)]) == (2, 3 * A)
    assert vio.aligned_prefix([(A, 0), (A, A)]) == (1, A)  # empty segments are skipped
    assert vio.aligned_prefix([(A + 64, A)]) == (0, 0)
    assert vio.aligned_prefix([(A, A + 1), (3 * A, A)]) == (0, 0)
    assert vio.aligned_prefix([]) == (0, 0)


_NAME = st.text(alphabet=st.sampled_from(list("ab./\\\x00-_é")), min_size=0, max_size=8)


@given(st.lists(_NAME, min_size=1, max_size=6))
def test_bulk_name_check_agrees_with_per_name_rule(names: list[str]) -> None:
    from hicache_backend_file.names import is_page_name

    expect_ok = all(is_page_name(n) for n in names)
    if expect_ok:
        check_names(names)
    else:
        with pytest.raises(ValueError):
            check_names(names)
