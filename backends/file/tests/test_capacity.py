"""Byte limit with LRU eviction, within one process and across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _helpers import pattern, segs
from hicache_backend_file import FileTransport
from hicache_backend_file.capacity import LEDGER_NAME

Make = Callable[..., FileTransport]
PAGE = 1000


def disk_pages(root: Path) -> dict[str, int]:
    return {
        str(f.relative_to(root)): f.stat().st_size
        for f in root.rglob("*")
        if f.is_file() and not f.name.startswith(".")
    }


def test_eviction_keeps_under_limit_and_is_lru(make_transport: Make, root: Path) -> None:
    t = make_transport(max_bytes=10 * PAGE, eviction_ratio=0.5)
    data = [pattern(i, PAGE) for i in range(12)]
    names = [f"p/{i:02d}" for i in range(12)]
    assert t.write(names[:10], [segs(d) for d in data[:10]]) == [True] * 10
    assert t.ledger is not None and t.ledger.used() == 10 * PAGE
    for i in range(10):  # a strict age order (mtime resolution is coarse)
        os.utime(root / names[i], ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    out = np.zeros(PAGE, np.uint8)
    assert t.read([names[0]], [segs(out)]) == [True]  # page 0 becomes the most recent
    assert t.write([names[10]], [segs(data[10])]) == [True]
    on_disk = disk_pages(root)
    assert sum(on_disk.values()) <= 5 * PAGE
    assert names[0] in on_disk and names[10] in on_disk
    assert names[1] not in on_disk and names[2] not in on_disk  # the oldest went first
    assert t.ledger.used() == sum(on_disk.values())
    assert t.ledger.evicted >= 6


def test_page_larger_than_limit_refused(make_transport: Make, root: Path) -> None:
    t = make_transport(max_bytes=PAGE)
    big = pattern(1, PAGE + 1)
    assert t.write(["big"], [segs(big)]) == [False]
    assert t.errors() == {"capacity": 1}
    assert disk_pages(root) == {}


def test_human_readable_max_size_and_delete_releases(make_transport: Make) -> None:
    t = make_transport(max_size="4k")
    assert t.ledger is not None and t.ledger.limit == 4000
    d = pattern(1, PAGE)
    t.write(["a", "b"], [segs(d), segs(d)])
    assert t.ledger.used() == 2 * PAGE
    t.delete(["a"])
    assert t.ledger.used() == PAGE
    t.write(["b"], [segs(d)])  # present: no new reservation
    assert t.ledger.used() == PAGE
    t.clear()
    assert t.ledger.used() == 0


def test_ledger_resynced_at_start(make_transport: Make, root: Path) -> None:
    t = make_transport()
    d = pattern(1, PAGE)
    t.write(["a", "b", "c"], [segs(d)] * 3)
    (root / LEDGER_NAME).write_bytes((123456).to_bytes(8, "little"))  # drifted ledger
    t2 = make_transport(max_bytes=100 * PAGE)
    assert t2.ledger is not None and t2.ledger.used() == 3 * PAGE


_WRITER = r"""
import sys, os, numpy as np
from hicache_backend_file import FileConfig, FileTransport
root, who, limit, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
t = FileTransport(FileConfig(root=root, max_bytes=limit, io_threads=2), environ={})
d = np.full(1000, ord(who[0]), np.uint8)
def size(path):
    try:
        return os.path.getsize(path)
    except FileNotFoundError:  # evicted by the other process while we were counting
        return 0
worst = 0
for b in range(12):
    names = [f"{who}/{b}-{i}" for i in range(batch)]
    assert t.write(names, [[(int(d.ctypes.data), d.nbytes)]] * batch) == [True] * batch
    total = 0
    for dp, _dn, fn in os.walk(root):
        total += sum(size(os.path.join(dp, f)) for f in fn if not f.startswith("."))
    worst = max(worst, total)
print(worst)
"""


def test_two_processes_share_the_limit(root: Path, make_transport: Make) -> None:
    make_transport(max_bytes=1)  # create the root
    limit, batch = 20 * PAGE, 4
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(root), who, str(limit), str(batch)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for who in ("a", "b")
    ]
    worst = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        worst.append(int(out))
    assert max(worst) <= limit + batch * PAGE
    final = sum(disk_pages(root).values())
    # an eviction rescan does not see another process's in-flight batch (still temp files),
    # so the bound is the limit plus one batch of the other writer (documented)
    assert final <= limit + batch * PAGE
    # both writers wrote 48 pages each, far above the limit: eviction did happen
    assert final >= limit * 0.9 * 0.5


def test_min_free_space_watermark_evicts_and_refuses(
    make_transport: Make, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLang's ``min_free_space``: a file system of 40 pages' worth, a watermark of 30
    pages, so at most 10 pages may be held; older pages are evicted to make room and a
    batch that cannot fit even after eviction is refused."""
    from hicache_backend_file import capacity

    fs_bytes = 40 * PAGE

    class FakeStatvfs:
        f_frsize = 1

        @property
        def f_bavail(self) -> int:  # what the pages under the root leave free
            return fs_bytes - sum(disk_pages(root).values())

    monkeypatch.setattr(capacity.os, "statvfs", lambda _path: FakeStatvfs())
    t = make_transport(min_free_space=str(30 * PAGE), eviction_ratio=0.5)
    assert t.ledger is not None and t.ledger.limit == 0 and t.ledger.min_free == 30 * PAGE
    data = [pattern(i, PAGE) for i in range(14)]
    for i in range(14):
        assert t.write([f"p{i}"], [segs(data[i])]) == [True]
        assert sum(disk_pages(root).values()) <= 10 * PAGE
    assert "p13" in disk_pages(root) and "p0" not in disk_pages(root)  # LRU: the oldest went
    # a batch larger than the watermark allows is written page by page, each evicting
    # what is published: over the bound by at most that batch, and back under it with
    # the next write; a page that cannot fit at all is refused
    more = [pattern(100 + i, PAGE) for i in range(12)]
    assert t.write([f"m{i}" for i in range(12)], [segs(b) for b in more]) == [True] * 12
    assert sum(disk_pages(root).values()) <= (10 + 12) * PAGE
    assert t.write(["after"], [segs(pattern(99, PAGE))]) == [True]
    assert sum(disk_pages(root).values()) <= 10 * PAGE
    huge = pattern(7, 11 * PAGE)
    assert t.write(["huge"], [segs(huge)]) == [False]
    assert "huge" not in disk_pages(root)
    assert not [n for n in os.listdir(root) if n.endswith(".tmp")]
