"""SIGKILL a writer at many points; a reader must see only byte-exact pages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _helpers import listing, segs
from hicache_backend_file import FileConfig, FileTransport

CHILD = str(Path(__file__).with_name("_crash_child.py"))
NPAGES = 24
NBYTES = 256 << 10


def expected(i: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 256, NBYTES, dtype=np.uint8)


def names() -> list[str]:
    return [f"ns/m/{i % 4:02x}/page{i}" for i in range(NPAGES)]


def run_and_kill(root: Path, mode: str, k: int, marker: str) -> int:
    """Start the child, wait for ``marker k`` on its pipe, SIGKILL it. Returns the number
    of pages it reported published."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.Popen(
        [sys.executable, CHILD, str(root), mode, str(NPAGES), str(NBYTES), str(k)],
        stdout=subprocess.PIPE,
        env=env,
    )
    published = 0
    assert p.stdout is not None
    try:
        for line in p.stdout:
            tag, _, idx = line.decode().strip().partition(" ")
            if tag == "P":
                published += 1
            if tag == marker and idx == str(k):
                break
            if tag == "D":
                break
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait(timeout=30)
        p.stdout.close()
    assert p.returncode == -signal.SIGKILL
    return published


def check_reader(root: Path, published_at_least: int) -> tuple[int, int]:
    """Every visible page is byte-exact; returns (hits, temp files before cleanup)."""
    temps = [f for f in listing(root) if os.path.basename(f).startswith(".") and f.endswith(".tmp")]
    t = FileTransport(FileConfig(root=str(root), io_threads=1), environ={})
    try:
        sizes = t.exists(names())
        hits = 0
        for i, size in enumerate(sizes):
            if size is None:
                continue
            assert size == NBYTES, f"page{i}: visible with {size} bytes"
            out = np.zeros(NBYTES, np.uint8)
            assert t.read([names()[i]], [segs(out)]) == [True]
            assert np.array_equal(out, expected(i)), f"page{i}: wrong bytes"
            hits += 1
        assert hits >= published_at_least
        # every non-temporary file is a complete, expected page
        for f in listing(root):
            if not os.path.basename(f).startswith("."):
                assert f in names() and os.path.getsize(root / f) == NBYTES
        # the writer is dead: its temporary files were cleaned at start
        assert not [f for f in listing(root) if f.endswith(".tmp")]
    finally:
        t.close()
    return hits, len(temps)


@pytest.mark.parametrize("k", [0, 3, 11, 23])
def test_kill_after_k_published(tmp_path: Path, k: int) -> None:
    published = run_and_kill(tmp_path / "c", "publish", k, "P")
    assert published >= k + 1
    check_reader(tmp_path / "c", published)


@pytest.mark.parametrize("k", [0, 7, 19])
def test_kill_between_temp_and_publish(tmp_path: Path, k: int) -> None:
    published = run_and_kill(tmp_path / "c", "before_publish", k, "T")
    assert published == k
    hits, temps = check_reader(tmp_path / "c", published)
    assert hits == k  # the complete temporary file was never a hit
    assert temps == 1


@pytest.mark.parametrize("k", [0, 5])
def test_kill_mid_write(tmp_path: Path, k: int) -> None:
    published = run_and_kill(tmp_path / "c", "mid_write", k, "W")
    assert published == k
    hits, temps = check_reader(tmp_path / "c", published)
    assert hits == k and temps == 1
