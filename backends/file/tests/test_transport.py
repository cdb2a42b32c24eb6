"""FileTransport: byte-exact round trips, create-if-absent, concurrency, security, errors."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _helpers import listing, pattern, segs
from hicache_backend_file import FileTransport, RootError, vio
from hypothesis import given, settings
from hypothesis import strategies as st

from hicache_sdk.kit.existence import CachedExistence

Make = Callable[..., FileTransport]


def test_round_trip_scatter_lists(make_transport: Make, root: Path) -> None:
    t = make_transport()
    pages = [pattern(i, 4096 + 7 * i) for i in range(6)]
    names = [f"ns/m/p/{i:02x}/{'ab' * 32}" for i in range(3)] + [f"h{i}_model_0_1.bin" for i in range(3)]
    assert t.write(names, [segs(p, parts=1 + i % 4) for i, p in enumerate(pages)]) == [True] * 6
    assert t.exists(names) == [p.nbytes for p in pages]
    outs = [np.zeros_like(p) for p in pages]
    assert t.read(names, [segs(o, parts=3) for o in outs]) == [True] * 6
    for p, o in zip(pages, outs):
        assert np.array_equal(p, o)
    # the flat names live in the root itself; fanned-out ones in subdirectories
    assert (root / "h0_model_0_1.bin").is_file()
    assert (root / "ns/m/p/00" / ("ab" * 32)).is_file()
    assert not [f for f in listing(root) if f.endswith(".tmp")]


def test_file_is_concatenation_of_segments(make_transport: Make, root: Path) -> None:
    t = make_transport()
    a, b = pattern(1, 1000), pattern(2, 24)
    assert t.write(["k"], [segs(a) + segs(b)]) == [True]
    assert (root / "k").read_bytes() == a.tobytes() + b.tobytes()


def test_exists_empty_missing_duplicates(make_transport: Make) -> None:
    t = make_transport()
    assert t.exists([]) == []
    p = pattern(3, 100)
    t.write(["a"], [segs(p)])
    assert t.exists(["a", "b", "a"]) == [100, None, 100]
    assert t.read([], []) == []
    assert t.write([], []) == []


def test_read_size_mismatch_is_miss(make_transport: Make) -> None:
    t = make_transport()
    p = pattern(4, 100)
    t.write(["a"], [segs(p)])
    short, long_ = np.zeros(99, np.uint8), np.zeros(101, np.uint8)
    assert t.read(["a", "missing"], [segs(short), segs(short)]) == [False, False]
    assert t.errors() == {"size_mismatch": 1, "removed_wrong_size": 1, "not_found": 1}
    assert t.exists(["a"]) == [None]  # the wrong-size file was removed
    t.write(["a"], [segs(p)])
    assert t.read(["a"], [segs(long_)]) == [False]
    assert t.exists(["a"]) == [None]


def test_create_if_absent_keeps_first(make_transport: Make, root: Path) -> None:
    t = make_transport()
    first, second = pattern(5, 64), pattern(6, 64)
    assert t.write(["k", "k"], [segs(first), segs(second)]) == [True, True]
    got = (root / "k").read_bytes()
    assert got in (first.tobytes(), second.tobytes())
    assert t.write(["k"], [segs(pattern(7, 64))]) == [True]
    assert (root / "k").read_bytes() == got
    assert not [f for f in listing(root) if f.endswith(".tmp")]


def test_concurrent_writers_one_winner(make_transport: Make, root: Path) -> None:
    t = make_transport(io_threads=4)
    bufs = [pattern(100 + i, 8192) for i in range(8)]
    results: list[list[bool]] = []

    def writer(i: int) -> None:
        results.append(t.write([f"d/page{j}" for j in range(16)], [segs(bufs[i])] * 16))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(r == [True] * 16 for r in results)
    allowed = {b.tobytes() for b in bufs}
    for j in range(16):
        assert (root / f"d/page{j}").read_bytes() in allowed
    assert listing(root) == sorted(f"d/page{j}" for j in range(16))


def test_delete_and_clear_prefix(make_transport: Make, root: Path) -> None:
    t = make_transport()
    p = pattern(8, 10)
    names = ["ns1/m/aa/x", "ns1/m/bb/y", "ns1/n/aa/z", "ns2/m/aa/x", "flat.bin"]
    t.write(names, [segs(p)] * len(names))
    (root / ".keepme.tmp").write_bytes(b"live writer")
    t.delete(["ns1/m/aa/x", "never"])
    assert t.exists(names) == [None, 10, 10, 10, 10]
    t.clear("ns1/m")
    assert t.exists(names) == [None, None, 10, 10, 10]
    t.clear("ns2/")
    assert t.exists(names) == [None, None, 10, None, 10]
    t.clear()
    assert t.exists(names) == [None] * 5
    # temporary files are never removed by clear
    assert (root / ".keepme.tmp").exists()


def test_clear_never_leaves_root(make_transport: Make, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"x")
    t = make_transport()
    os.symlink(outside, t.root + "/link")
    os.symlink(outside / "victim", t.root + "/filelink")
    t.clear()
    assert (outside / "victim").read_bytes() == b"x"
    assert t.exists(["filelink"]) == [None]
    # no symlink is followed on any component, whoever placed it (test_beneath.py)
    assert t.exists(["link/victim"]) == [None]
    with pytest.raises(ValueError, match="prefix"):
        t.clear("../outside")


BAD_NAMES = [
    "",
    "/etc/passwd",
    "../x",
    "a/../../x",
    "a/./b",
    "a//b",
    "a/",
    ".hidden",
    "a/.tmp",
    "a\x00b",
    "a\\b",
    "x" * 256,
    "/".join(["x"] * 600),
]


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_bad_names_rejected_before_io(make_transport: Make, root: Path, bad: str) -> None:
    t = make_transport()
    buf = pattern(9, 8)
    before = listing(root)
    for call in (
        lambda: t.exists(["ok", bad]),
        lambda: t.read(["ok", bad], [segs(buf)] * 2),
        lambda: t.write(["ok", bad], [segs(buf)] * 2),
        lambda: t.delete([bad]),
    ):
        with pytest.raises(ValueError, match=r"keys\[\d\]"):
            call()
    assert listing(root) == before


@settings(max_examples=200, deadline=None)
@given(st.text(st.sampled_from("ab./\\\x00-_"), max_size=12))
def test_accepted_names_stay_under_root(name: str) -> None:
    from hicache_backend_file.names import is_page_name

    if is_page_name(name):
        resolved = os.path.normpath(os.path.join("/root", name))
        assert resolved.startswith("/root/")
        assert ".." not in name.split("/") and "\x00" not in name
        assert not any(c.startswith(".") for c in name.split("/"))


def test_symlinked_page_is_not_followed(make_transport: Make, tmp_path: Path) -> None:
    t = make_transport()
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 16)
    os.symlink(secret, os.path.join(t.root, "evil"))
    out = np.zeros(16, np.uint8)
    assert t.exists(["evil"]) == [None]
    assert t.read(["evil"], [segs(out)]) == [False]
    assert not out.any()
    assert t.errors().get("not_regular") == 1
    # a write under that name does not write through the link
    assert t.write(["evil"], [segs(pattern(1, 16))]) == [False]
    assert secret.read_bytes() == b"s" * 16


def test_modes_default_and_configurable(make_transport: Make, tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        t = make_transport()
        t.write(["a/b"], [segs(pattern(1, 4))])
        assert stat.S_IMODE(os.stat(t.root).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(t.root + "/a").st_mode) == 0o700
        assert stat.S_IMODE(os.stat(t.root + "/a/b").st_mode) == 0o600
        t2 = make_transport(root=str(tmp_path / "shared"), file_mode=0o640, dir_mode=0o750)
        t2.write(["a/b"], [segs(pattern(1, 4))])
        assert stat.S_IMODE(os.stat(t2.root + "/a").st_mode) == 0o750
        assert stat.S_IMODE(os.stat(t2.root + "/a/b").st_mode) == 0o640
    finally:
        os.umask(old)


def test_root_writable_by_others_refused(make_transport: Make, tmp_path: Path) -> None:
    r = tmp_path / "open"
    r.mkdir()
    os.chmod(r, 0o777)
    with pytest.raises(RootError, match="writable by others"):
        make_transport(root=str(r))
    t = make_transport(root=str(r), strict_root=False)
    assert t.health()


def test_root_owned_by_other_user_refused(make_transport: Make, tmp_path: Path) -> None:
    r = tmp_path / "foreign"
    r.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
    os.chown(r, 65534, 65534)
    with pytest.raises(RootError, match="owned by uid 65534"):
        make_transport(root=str(r))
    link = tmp_path / "mine"
    os.symlink(r, link)
    with pytest.raises(RootError):
        make_transport(root=str(link))


def test_root_not_a_directory(make_transport: Make, tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"")
    with pytest.raises(RootError):
        make_transport(root=str(f))


def test_injected_enospc_is_false_and_clean(
    make_transport: Make, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_transport(io_threads=1)
    real = os.pwritev
    calls = {"n": 0}

    def failing(fd: int, bufs: list[memoryview], off: int) -> int:
        calls["n"] += 1
        if calls["n"] == 2:  # first page written partially, then the disk fills
            raise OSError(errno.ENOSPC, "No space left on device")
        return (
            real(fd, bufs[:1], off)
            if len(bufs) > 1
            else real(fd, [bufs[0][: max(1, len(bufs[0]) // 2)]], off)
        )

    monkeypatch.setattr(vio.os, "pwritev", failing)
    p = pattern(1, 1000)
    assert t.write(["x/a"], [segs(p, parts=2)]) == [False]
    monkeypatch.setattr(vio.os, "pwritev", real)
    assert t.errors() == {"disk_full": 1}
    assert listing(root) == []
    assert t.write(["x/a"], [segs(p, parts=2)]) == [True]


def test_injected_permission_denied_on_read(make_transport: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    t = make_transport()
    p = pattern(1, 10)
    t.write(["a"], [segs(p)])
    real_open = os.open

    def deny(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "open", deny)
    out = np.zeros(10, np.uint8)
    assert t.read(["a"], [segs(out)]) == [False]
    assert t.write(["b"], [segs(p)]) == [False]
    monkeypatch.setattr(os, "open", real_open)
    assert t.errors() == {"permission": 2}


def test_deleted_between_exists_and_read(make_transport: Make, root: Path) -> None:
    """SGLang's metadata cache is the kit's CachedExistence in front of the transport."""
    t = CachedExistence(make_transport(), 5.0)
    p = pattern(1, 10)
    t.write(["a"], [segs(p)])
    assert t.exists(["a"]) == [10]
    (root / "a").unlink()
    assert t.exists(["a"]) == [10]  # the positive cache still says present (documented)
    out = np.zeros(10, np.uint8)
    assert t.read(["a"], [segs(out)]) == [False]
    assert t.exists(["a"]) == [None]  # the failed read dropped the entry
    assert t.inner.errors() == {"not_found": 1}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("enable", "ttl", "want"), [(True, 5.0, 5.0), (True, -1, -1.0), (True, 0.0, 0.0), (False, 5.0, 0.0)]
)
def test_metadata_cache_settings_select_the_adapter_cache(
    enable: bool, ttl: float, want: float, root: Path
) -> None:
    from hicache_backend_file import FileStorage

    from hicache_sdk.spec import HiCacheStorageConfig

    cfg = {"root": str(root), "enable_metadata_cache": enable, "metadata_ttl": ttl}
    s = FileStorage(HiCacheStorageConfig(extra_config=cfg), {})
    try:
        inner = s.transport.inner  # type: ignore[attr-defined]
        assert isinstance(inner, CachedExistence) == (want != 0)
        if want:
            assert inner.ttl_s == want
    finally:
        s.close()


def test_closed_transport_misses(make_transport: Make) -> None:
    t = make_transport()
    p = pattern(1, 10)
    t.write(["a"], [segs(p)])
    t.close()
    t.close()
    assert t.exists(["a"]) == [None]
    assert t.read(["a"], [segs(p)]) == [False]
    assert t.write(["a"], [segs(p)]) == [False]
    assert not t.health()


def test_bad_segments_and_lengths(make_transport: Make) -> None:
    t = make_transport()
    with pytest.raises(ValueError, match="buffers"):
        t.read(["a", "b"], [[(1, 1)]])
    with pytest.raises(ValueError, match=r"buffers\[0\]"):
        t.write(["a"], [[(0, 10)]])
    with pytest.raises(ValueError, match=r"buffers\[0\]"):
        t.write(["a"], [[(1234, -1)]])


def test_large_segment_count(make_transport: Make) -> None:
    t = make_transport()
    p = pattern(2, 3000 * 8)
    assert t.write(["many"], [segs(p, parts=3000)]) == [True]  # > IOV_MAX segments
    out = np.zeros_like(p)
    assert t.read(["many"], [segs(out, parts=3000)]) == [True]
    assert np.array_equal(out, p)


def test_fsync_mode_round_trip(make_transport: Make) -> None:
    t = make_transport(fsync=True)
    p = pattern(3, 5000)
    assert t.write(["d/e/f"], [segs(p)]) == [True]
    out = np.zeros_like(p)
    assert t.read(["d/e/f"], [segs(out)]) == [True] and np.array_equal(out, p)


def test_exists_answers_every_kind_of_entry(make_transport: Make, root: Path) -> None:
    """Sizes of regular files only; absence, directories, symlinks and FIFOs are ``None``.
    A failure other than absence (a directory this user may not search) is ``None`` and
    counted; absence is not counted."""
    t = make_transport()
    names = ["a", "ns/m/p/ab/x", "ns/m/p/ab/y", "gone", "ns/none/z", "sub", "link", "fifo", "locked/w"]
    assert (
        t.write(
            ["a", "ns/m/p/ab/x", "ns/m/p/ab/y"],
            [segs(pattern(1, 10)), segs(pattern(2, 4096)), segs(np.zeros(0, np.uint8))],
        )
        == [True] * 3
    )
    (root / "sub").mkdir()
    (root / "link").symlink_to(root / "a")
    os.mkfifo(root / "fifo")
    (root / "locked").mkdir()
    (root / "locked" / "w").write_bytes(b"1234")
    before = t.errors()
    os.chmod(root / "locked", 0)
    try:
        got = t.exists(names)
    finally:
        os.chmod(root / "locked", 0o700)
    # root may search any directory: then locked/w is found
    locked = 4 if os.geteuid() == 0 else None
    assert got == [10, 4096, 0, None, None, None, None, None, locked]
    grew = {k: v - before.get(k, 0) for k, v in t.errors().items() if v != before.get(k, 0)}
    assert grew == ({} if os.geteuid() == 0 else {"permission": 1})
