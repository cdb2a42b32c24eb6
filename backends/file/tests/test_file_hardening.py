"""What a reliability review broke in the file backend (issue 10), kept fixed: one
planted directory must not switch ``RWF_NOWAIT`` off, a read-only root serves reads,
a FIFO ledger and a foreign root are refused with the right message, duplicate names in
one write batch keep the first copy, and ``fsync=true`` really fsyncs."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from _helpers import pattern, segs
from hicache_backend_file import FileConfig, FileTransport, RootError
from hicache_backend_file import reads as reads_mod
from hicache_backend_file import writes as writes_mod
from hicache_backend_file.capacity import LEDGER_NAME

Make = Callable[..., FileTransport]
_RWF_NOWAIT: int = getattr(os, "RWF_NOWAIT", 0)


# -- RWF_NOWAIT: decided once, at start --------------------------------------------------


def test_planted_directory_does_not_switch_off_rwf_nowait(
    make_transport: Make, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a directory planted under a page name fails with ``EOPNOTSUPP`` under
    ``RWF_NOWAIT``; that object is a miss, and later warm reads still use the flag."""
    t = make_transport()
    if not t._nowait:
        pytest.skip("RWF_NOWAIT does not work on this file system (the probe said so)")
    p = pattern(1, 8192)
    assert t.write(["good"], [segs(p)]) == [True]
    os.mkdir(root / "planted")
    out = np.zeros(8192, np.uint8)
    assert t.read(["planted"], [segs(out)]) == [False]
    assert t.read(["planted", "good"], [segs(out), segs(out)]) == [False, True]
    assert t.errors().get("not_regular") == 2
    assert t._nowait, "one planted directory switched RWF_NOWAIT off for every later read"
    seen: list[int] = []
    real = os.preadv

    def spy(fd: int, bufs: list[object], offset: int, flags: int = 0) -> int:
        seen.append(flags)
        return real(fd, bufs, offset, flags)

    monkeypatch.setattr(reads_mod.os, "preadv", spy)
    out[:] = 0
    assert t.read(["good"], [segs(out)]) == [True] and np.array_equal(out, p)
    assert seen and seen[0] == _RWF_NOWAIT, f"the warm read did not use RWF_NOWAIT (flags {seen})"


def test_rwf_nowait_probe_runs_on_a_file_of_our_own(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert reads_mod.probe_nowait(fd) is bool(_RWF_NOWAIT)
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []  # the probe file is gone


# -- read-only root -----------------------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (test_read_only_errno_is_counted covers the mapping)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _remount_ro(mnt: Path) -> None:
    r = subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot remount read-only here")


def test_read_only_root_serves_reads(tmpfs: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Pages written earlier, root remounted read-only, a new backend (with a byte limit,
    so a ledger would be needed): it constructs, warns once, stays healthy, serves every
    page, and each write fails with the counted reason ``read_only``."""
    cfg = FileConfig(root=str(tmpfs / "c"), max_bytes=1 << 20, io_threads=2)
    names = ["flat_a.bin", "ns/m/ab/" + "ab" * 32]
    pages = [pattern(i, 5000) for i in range(2)]
    w = FileTransport(cfg, environ={})
    assert w.write(names, [segs(p) for p in pages]) == [True, True]
    w.close()
    _remount_ro(tmpfs)
    with caplog.at_level(logging.WARNING, logger="hicache_backend_file"):
        t = FileTransport(cfg, environ={})
    try:
        warned = [r for r in caplog.records if "read-only" in r.getMessage()]
        assert len(warned) == 1 and warned[0].levelno == logging.WARNING
        assert t.read_only and t.ledger is None
        assert t.health(), "a readable read-only root must not keep the breaker open"
        assert t.exists(names) == [5000, 5000]
        outs = [np.zeros(5000, np.uint8) for _ in pages]
        assert t.read(names, [segs(o) for o in outs]) == [True, True]
        assert all(np.array_equal(o, p) for o, p in zip(outs, pages))
        assert t.write(["new"], [segs(pages[0])]) == [False]
        assert t.errors() == {"read_only": 1}
        assert t.health()
    finally:
        t.close()


def test_read_only_root_through_the_adapter(tmpfs: Path) -> None:
    """The same through ``FileStorage``: the resilience layer probes ``health()`` at start
    (a write-access check kept the breaker open, so every hit was a miss)."""
    torch = pytest.importorskip("torch")
    from hicache_backend_file import FileStorage

    from hicache_sdk.hostpool import MHAHostPool
    from hicache_sdk.spec import HiCacheStorageConfig

    def make() -> FileStorage:
        sc = HiCacheStorageConfig(model_name="m", extra_config={"root": str(tmpfs / "c")})
        s = FileStorage(sc, {})
        s.register_mem_pool_host(MHAHostPool(16, 4, 2, 2, 8, dtype=torch.bfloat16, pin_memory=False))
        return s

    keys = [f"{i:064x}" for i in range(3)]
    idx = torch.arange(12, dtype=torch.int64)
    s = make()
    assert s.batch_set_v1(keys, idx) == [True] * 3
    s.close()
    _remount_ro(tmpfs)
    r = make()
    try:
        for _ in range(3):
            assert r.batch_exists(keys) == 3
            assert r.batch_get_v1(keys, idx) == [True] * 3
        assert r.batch_set_v1([f"{9:064x}"], idx[:4]) == [False]
    finally:
        r.close()


def test_read_only_errno_is_counted(make_transport: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a mount: ``EROFS`` at the syscall boundary of a write is the counted
    reason ``read_only``, the write is ``False`` and nothing raises."""
    import errno

    t = make_transport(io_threads=1)
    real = os.open

    def erofs(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system", path)
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(writes_mod.os, "open", erofs)
    assert t.write(["a", "b/c"], [segs(pattern(1, 10))] * 2) == [False, False]
    assert t.errors() == {"read_only": 2}


# -- smaller ones ---------------------------------------------------------------------------


def test_fifo_ledger_is_refused_naming_path_and_cause(make_transport: Make, root: Path) -> None:
    root.mkdir(mode=0o700)
    os.mkfifo(root / LEDGER_NAME)
    with pytest.raises(RootError) as e:
        make_transport(max_bytes=1 << 20)
    msg = str(e.value)
    assert str(root / LEDGER_NAME) in msg and "FIFO" in msg and "Illegal seek" not in msg


def test_plain_directory_of_another_user_is_not_called_a_symlink(
    make_transport: Make, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
    r = tmp_path / "foreign"
    r.mkdir(mode=0o700)
    os.chown(r, 65534, 65534)
    with pytest.raises(RootError) as e:
        make_transport(root=str(r))
    assert "root directory" in str(e.value) and "symlink" not in str(e.value)
    link = tmp_path / "mine"
    os.symlink(r, link)  # a symlink of ours to a foreign directory: the directory is named
    with pytest.raises(RootError, match="root directory"):
        make_transport(root=str(link))
    os.lchown(link, 65534, 65534)  # a foreign symlink: the symlink is named
    with pytest.raises(RootError, match="root symlink"):
        make_transport(root=str(link))


@pytest.mark.parametrize("io_threads", [1, 4])
def test_duplicate_names_in_one_batch_keep_the_first_copy(
    make_transport: Make, root: Path, io_threads: int
) -> None:
    """The contract says the first write wins; the parallel writer kept the second copy
    about three times in four. Every occurrence gets the first write's result."""
    t = make_transport(io_threads=io_threads)
    for trial in range(20):
        first, second, third = (
            pattern(3 * trial, 4096),
            pattern(3 * trial + 1, 4096),
            pattern(3 * trial + 2, 4096),
        )
        k = f"d{trial}/k"
        assert (
            t.write([k, "x" + k, k, k], [segs(first), segs(second), segs(second), segs(third)]) == [True] * 4
        )
        assert (root / k).read_bytes() == first.tobytes(), f"trial {trial}: a later copy won"


def test_duplicate_of_a_failed_write_is_false_too(make_transport: Make, root: Path) -> None:
    t = make_transport(io_threads=1)
    root_fd_dir = root / "blocked"
    root_fd_dir.write_bytes(b"")  # a file where a directory is needed: the write fails
    assert t.write(["blocked/a", "blocked/a"], [segs(pattern(1, 10))] * 2) == [False, False]


def test_fsync_true_fsyncs_the_file_before_publish_and_the_directory_after(
    make_transport: Make, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_transport(fsync=True, io_threads=1)
    events: list[tuple[str, str]] = []
    real_fsync, real_publish = os.fsync, writes_mod.publish_noreplace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def publish(tmp: str, final: str, dir_fd: int = -100) -> bool:
        events.append(("publish", final))
        return real_publish(tmp, final, dir_fd)

    monkeypatch.setattr(writes_mod.os, "fsync", fsync)
    monkeypatch.setattr(writes_mod, "publish_noreplace", publish)
    assert t.write(["d/e/page"], [segs(pattern(1, 100))]) == [True]
    real_root = os.path.realpath(root)
    assert len(events) == 3, events
    (k0, tmp), (k1, final), (k2, dirpath) = events
    assert k0 == "fsync" and os.path.dirname(tmp) == f"{real_root}/d/e" and tmp.endswith(".tmp"), events
    assert k1 == "publish" and os.path.basename(final) == "page", events
    assert k2 == "fsync" and dirpath == f"{real_root}/d/e", events
    events.clear()
    assert t.write(["flat"], [segs(pattern(2, 100))]) == [True]
    assert [k for k, _ in events] == ["fsync", "publish", "fsync"] and events[2][1] == real_root
    events.clear()
    t2 = make_transport(root=str(root), fsync=False, io_threads=1)
    assert t2.write(["nosync"], [segs(pattern(3, 100))]) == [True]
    assert [k for k, _ in events] == ["publish"]  # fsync=false: no fsync at all
