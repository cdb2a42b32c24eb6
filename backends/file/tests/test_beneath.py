"""Nothing the file backend opens, walks or deletes resolves outside the root: a symlink
planted anywhere under the root -- the namespace directory ``_`` of the default scheme
included -- is never followed, on the ``openat2`` path and on the ``O_NOFOLLOW`` walk
that replaces it on kernels without ``openat2`` (forced here)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _helpers import listing, pattern, segs
from hicache_backend_file import FileTransport, beneath
from hicache_backend_file import file_transport as transport_mod

Make = Callable[..., FileTransport]
PAGE = "_/m/kv-0123456789abcdef/ab/" + "ab" * 32


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with the kernel's ``openat2`` and with the forced fallback walk."""
    mode = str(request.param)
    if mode == "openat2" and not beneath.OPENAT2:
        pytest.skip("this kernel has no openat2 (the walk covers it)")
    monkeypatch.setattr(beneath, "OPENAT2", mode == "openat2")
    return mode


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A directory outside the root holding files named like default-scheme pages."""
    d = tmp_path / "elsewhere"
    (d / "m/kv-0123456789abcdef/ab").mkdir(parents=True)
    (d / PAGE[2:]).write_bytes(b"x" * 64)
    (d / "victim").write_bytes(b"v" * 64)
    return d


def _plant(t: FileTransport, target: Path, name: str = "_") -> None:
    os.symlink(target, os.path.join(t.root, name))


def test_resolution_mode_is_the_one_forced(make_transport: Make, resolution: str) -> None:
    t = make_transport()
    assert t._fs.openat2 is (resolution == "openat2")


def test_clear_never_follows_a_planted_namespace_symlink(
    make_transport: Make, resolution: str, elsewhere: Path
) -> None:
    """``root/_ -> /elsewhere``: the default scheme's ``clear()`` (prefix ``"_/"``) walked
    into it and deleted the other directory's files."""
    t = make_transport()
    before = listing(elsewhere)
    _plant(t, elsewhere)
    for prefix in ("_/", "_/m/", "_/m/kv", ""):
        t.clear(prefix)
    assert listing(elsewhere) == before
    assert (elsewhere / PAGE[2:]).read_bytes() == b"x" * 64


def test_writes_never_land_through_a_planted_symlink(
    make_transport: Make, resolution: str, elsewhere: Path
) -> None:
    """Another user's ``_`` symlink in a shared root must not redirect new pages."""
    t = make_transport(io_threads=1)
    before = listing(elsewhere)
    _plant(t, elsewhere)
    new = "_/m/kv-0123456789abcdef/cd/" + "cd" * 32
    p = pattern(1, 64)
    assert t.write([new, "_/fresh/x"], [segs(p), segs(p)]) == [False, False]
    assert listing(elsewhere) == before, "a write landed outside the root"
    assert t.errors(), "the refused writes were not counted"
    # a deeper symlink (a model directory) is refused the same way
    os.makedirs(os.path.join(t.root, "ns"))
    _plant(t, elsewhere, "ns/m")
    assert t.write(["ns/m/kv-0123456789abcdef/ef/" + "ef" * 32], [segs(p)]) == [False]
    assert listing(elsewhere) == before
    # a real directory still works
    assert t.write(["ok/m/x"], [segs(p)]) == [True]


def test_reads_exists_delete_never_resolve_through_a_symlink(
    make_transport: Make, resolution: str, elsewhere: Path
) -> None:
    t = make_transport()
    _plant(t, elsewhere)
    out = np.zeros(64, np.uint8)
    assert t.exists([PAGE, "_/victim"]) == [None, None]
    assert t.read([PAGE], [segs(out)]) == [False] and not out.any()
    t.delete([PAGE])
    assert (elsewhere / PAGE[2:]).read_bytes() == b"x" * 64


def test_exists_resolves_beneath(make_transport: Make, resolution: str, elsewhere: Path) -> None:
    """Names in one directory share its descriptor within a call; a name under a planted
    symlink is absent, and so is every later name in that directory."""
    t = make_transport()
    root = Path(t.root)
    (root / "d/e").mkdir(parents=True)
    (root / "d/e/f").write_bytes(b"12345")
    _plant(t, elsewhere)
    names = ["d/e/f", "d/e/g", PAGE, "_/victim", "d/e/f", "_/m/kv-0123456789abcdef/ab/none"]
    assert t.exists(names) == [5, None, None, None, 5, None]


def test_eviction_and_stale_cleanup_stay_beneath(
    make_transport: Make, resolution: str, elsewhere: Path
) -> None:
    from hicache_backend_file import fsops

    stale = elsewhere / f".{fsops._HOST}-999999999-{'0' * 32}.tmp"  # a dead writer's name
    stale.write_bytes(b"t")
    before = listing(elsewhere)
    t = make_transport(max_bytes=200, io_threads=1)
    _plant(t, elsewhere)
    for i in range(8):  # well over the limit: eviction runs
        assert t.write([f"p{i}"], [segs(pattern(i, 64))]) == [True]
    assert t.ledger is not None and t.ledger.evicted > 0
    make_transport(io_threads=1)  # the start-up cleanup of stale temporary files
    assert listing(elsewhere) == before


def test_exists_over_more_directories_than_it_holds_open(
    make_transport: Make, resolution: str, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``_MAX_DIRS`` distinct directories in one call the descriptors held so far are
    closed and resolution starts over: the same answers, symlinks still refused, and no
    descriptor left open."""
    monkeypatch.setattr(transport_mod, "_MAX_DIRS", 16)
    t = make_transport()
    root = Path(t.root)
    names = []
    for i in range(40):
        (root / f"d{i}/s").mkdir(parents=True)
        (root / f"d{i}/s/f").write_bytes(b"x" * (i % 7))
        names.append(f"d{i}/s/f")
    _plant(t, elsewhere)
    names += [PAGE, "_/victim", "d1/s/none", "d39/s/f", "d0/s/f"]
    if t._cleanup is not None:  # the start-up sweep holds directory descriptors until it ends
        t._cleanup.result(10)
    before = len(os.listdir("/proc/self/fd"))
    assert t.exists(names) == [i % 7 for i in range(40)] + [None, None, None, 39 % 7, 0]
    assert len(os.listdir("/proc/self/fd")) == before
