"""The two-pass read of FileTransport: warm pages in the caller's thread without
``fstat`` (too-long / too-short / non-regular files still caught), cold pages on the
``cold_read_threads`` pool reusing the open descriptor."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _helpers import evict, pattern, segs
from hicache_backend_file import FileTransport, reads
from hicache_backend_file.config import FileConfig

Make = Callable[..., FileTransport]


@pytest.mark.parametrize("size", [4096 * 3, 4096 * 3 + 96, 100])
def test_warm_too_long_and_too_short_are_removed_misses(make_transport: Make, root: Path, size: int) -> None:
    """Both a page-multiple size (the extra byte may be uncached: fstat decides) and an
    odd size (the extra byte shares the last cached page)."""
    t = make_transport()
    good = pattern(1, size)
    assert t.write(["ok", "long", "short"], [segs(good)] * 3) == [True] * 3
    with open(root / "long", "ab") as f:
        f.write(b"x")
    os.truncate(root / "short", size - 1)
    for n in ("ok", "long", "short"):
        (root / n).read_bytes()  # cached: the warm pass sees them whole
    outs = [np.zeros(size, np.uint8) for _ in range(3)]
    assert t.read(["ok", "long", "short"], [segs(o) for o in outs]) == [True, False, False]
    assert np.array_equal(outs[0], good)
    assert not (root / "long").exists() and not (root / "short").exists()
    assert t.errors().get("removed_wrong_size") == 2


def test_directory_and_fifo_are_misses_that_never_block(make_transport: Make, root: Path) -> None:
    t = make_transport()
    os.mkdir(root / "dir")
    os.mkfifo(root / "fifo")
    out = np.zeros(64, np.uint8)
    done: list[list[bool]] = []
    th = threading.Thread(target=lambda: done.append(t.read(["dir", "fifo"], [segs(out), segs(out)])))
    th.start()
    th.join(10)
    assert done == [[False, False]]
    assert t.errors().get("not_regular") == 2
    assert (root / "dir").is_dir() and (root / "fifo").exists()  # never removed


@pytest.mark.parametrize("threads", [1, 3, 8])
def test_cold_pages_read_exactly_on_any_thread_count(make_transport: Make, root: Path, threads: int) -> None:
    t = make_transport(cold_read_threads=threads)
    pages = [pattern(i, 8192 + 96) for i in range(12)]
    names = [f"c/{i:02x}/p{i}" for i in range(12)]
    assert t.write(names, [segs(p) for p in pages]) == [True] * 12
    for n in names[::2]:
        evict(root / n)  # a mix of cold and warm pages
    outs = [np.zeros_like(p) for p in pages]
    assert t.read([*names, "missing"], [segs(o, parts=2) for o in outs] + [segs(outs[0])]) == [True] * 12 + [
        False
    ]
    for p, o in zip(pages, outs):
        assert np.array_equal(p, o)


def test_more_cold_pages_than_held_descriptors(
    make_transport: Make, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "_MAX_HELD_FDS", 1)
    t = make_transport()
    pages = [pattern(i, 4096 * 2 + 96) for i in range(5)]
    names = [f"h{i}" for i in range(5)]
    assert t.write(names, [segs(p) for p in pages]) == [True] * 5
    for n in names:
        evict(root / n)
    _wait_for_startup_sweep(t)
    before = _fds_under(root)
    outs = [np.zeros_like(p) for p in pages]
    assert t.read(names, [segs(o) for o in outs]) == [True] * 5
    assert all(np.array_equal(p, o) for p, o in zip(pages, outs))
    assert _fds_under(root) == before  # no descriptor leaked


def test_no_descriptor_leaks_on_mixed_batch(make_transport: Make, root: Path) -> None:
    t = make_transport()
    p = pattern(2, 5000)
    t.write(["a", "b"], [segs(p)] * 2)
    os.truncate(root / "b", 10)
    os.mkdir(root / "d")
    _wait_for_startup_sweep(t)
    before = _fds_under(root)
    out = np.zeros_like(p)
    for _ in range(3):
        assert t.read(["a", "b", "d", "zz"], [segs(out)] * 4) == [True, False, False, False]
    # descriptors on the store's own files only: other tests' threads may open or close
    # unrelated descriptors of this process meanwhile
    assert _fds_under(root) == before


def _wait_for_startup_sweep(t: FileTransport) -> None:
    """The start-up sweep of stale temporaries lists the root on a pool thread, holding
    directory descriptors until it ends: counting descriptors before then races it."""
    if t._cleanup is not None:
        t._cleanup.result(10)


def _fds_under(root: Path) -> list[str]:
    """What this process's descriptors under ``root`` point to, sorted."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor, another thread's)
            continue
        if target.startswith(str(root)):
            out.append(target)
    return sorted(out)


def test_cold_read_threads_validated() -> None:
    assert FileConfig().cold_read_threads == 8
    with pytest.raises(ValueError, match="cold_read_threads"):
        FileConfig(cold_read_threads=0)


@pytest.mark.parametrize("cold_threads", [1, 8])
def test_large_batch_split_over_two_threads_matches_single_pass(
    make_transport: Make, root: Path, cold_threads: int
) -> None:
    """A batch of at least ``_SPLIT_WARM_AT`` objects runs pass 1 on two threads (with a
    cold pool) or on one (without): the same answers, bytes and removals either way, with
    misses, wrong sizes and cold pages in both halves."""
    t = make_transport(cold_read_threads=cold_threads)
    n = 2 * reads._SPLIT_WARM_AT + 6
    names = [f"p{i:03d}" for i in range(n)]
    pages = [pattern(100 + i, 8192) for i in range(n)]
    assert t.write(names, [segs(p) for p in pages]) == [True] * n
    missing = {1, n - 2}
    wrong = {3, n - 4}
    cold = {5, n - 6, n - 1}
    for i in missing:
        os.unlink(root / names[i])
    for i in wrong:
        os.truncate(root / names[i], 8000)
    for i in range(n):
        if i not in missing and i not in wrong:
            (evict if i in cold else Path.read_bytes)(root / names[i])
    outs = [np.zeros(8192, np.uint8) for _ in range(n)]
    got = t.read(names, [segs(o, parts=2) for o in outs])
    assert got == [i not in missing and i not in wrong for i in range(n)]
    for i in range(n):
        if got[i]:
            assert np.array_equal(outs[i], pages[i]), i
    assert not any((root / names[i]).exists() for i in wrong)
