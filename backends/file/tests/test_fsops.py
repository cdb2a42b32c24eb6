"""Stale temporary files, no-replace publication, real disk-full and read-only mounts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from _helpers import listing, pattern, segs
from hicache_backend_file import FileTransport, fsops

Make = Callable[..., FileTransport]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temps_cleaned_live_kept(make_transport: Make, root: Path) -> None:
    make_transport(io_threads=1).close()
    (root / "d").mkdir()
    host = fsops._HOST
    dead = root / "d" / f".{host}-{_dead_pid()}-{uuid.uuid4().hex}.tmp"
    live = root / "d" / f".{host}-{os.getpid()}-{uuid.uuid4().hex}.tmp"
    live_old = root / f".{host}-{os.getpid()}-{uuid.uuid4().hex}.tmp"
    other_host_new = root / f".ffffffff-1-{uuid.uuid4().hex}.tmp"
    sglang_old = root / f".{uuid.uuid4().hex}.tmp"
    for f in (dead, live, live_old, other_host_new, sglang_old):
        f.write_bytes(b"partial")
    old = time.time() - 3600
    for f in (live_old, sglang_old):
        os.utime(f, (old, old))
    make_transport(io_threads=1, stale_temp_s=600)
    left = set(listing(root))
    assert str(dead.relative_to(root)) not in left
    assert str(sglang_old.relative_to(root)) not in left
    assert {str(f.relative_to(root)) for f in (live, live_old, other_host_new)} <= left


def test_publish_noreplace_link_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsops, "_renameat2_ok", False)
    a, b, final = tmp_path / "a", tmp_path / "b", tmp_path / "final"
    a.write_bytes(b"first")
    b.write_bytes(b"second")
    assert fsops.publish_noreplace(str(a), str(final)) is True
    assert not a.exists()
    assert fsops.publish_noreplace(str(b), str(final)) is False
    assert final.read_bytes() == b"first" and b.exists()


def test_publish_noreplace_renameat2(tmp_path: Path) -> None:
    a, b, final = tmp_path / "a", tmp_path / "b", tmp_path / "final"
    a.write_bytes(b"first")
    b.write_bytes(b"second")
    assert fsops.publish_noreplace(str(a), str(final)) is True
    assert fsops.publish_noreplace(str(b), str(final)) is False
    assert final.read_bytes() == b"first"


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (the injected-ENOSPC test covers this)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_real_disk_full(small_tmpfs: Path) -> None:
    t = FileTransport(fsops_config(small_tmpfs / "c"), environ={})
    try:
        pages = [pattern(i, 64 << 10) for i in range(8)]  # 512 KiB into 256 KiB
        res = t.write([f"p/{i}" for i in range(8)], [segs(p, parts=2) for p in pages])
        assert True in res and False in res
        assert t.errors().get("disk_full", 0) == res.count(False)
        assert not [f for f in listing(small_tmpfs / "c") if f.endswith(".tmp")]
        for i, ok in enumerate(res):
            out = np.zeros(64 << 10, np.uint8)
            assert t.read([f"p/{i}"], [segs(out)]) == [ok]
            if ok:
                assert np.array_equal(out, pages[i])
    finally:
        t.close()


def test_read_only_mount(small_tmpfs: Path) -> None:
    t = FileTransport(fsops_config(small_tmpfs / "c"), environ={})
    p = pattern(1, 1000)
    assert t.write(["a"], [segs(p)]) == [True]
    r = subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], capture_output=True)
    if r.returncode != 0:
        t.close()
        pytest.skip("cannot remount read-only")
    try:
        assert t.write(["b"], [segs(p)]) == [False]
        assert t.errors() == {"read_only": 1}
        out = np.zeros_like(p)
        assert t.read(["a"], [segs(out)]) == [True] and np.array_equal(out, p)
        t.delete(["a"])  # swallowed
        t.clear()
    finally:
        t.close()


def fsops_config(root: Path):  # type: ignore[no-untyped-def]
    from hicache_backend_file import FileConfig

    return FileConfig(root=str(root), io_threads=2)
