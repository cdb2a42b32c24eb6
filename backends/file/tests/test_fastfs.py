"""The C loop of ``exists`` (``hicache_backend_file._fastfs``) gives exactly the answers
of the Python ``os.stat`` loop, and the test command builds it (in CI its absence is a
failure, not a silent fallback)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from _helpers import pattern, segs
from hicache_backend_file import FileTransport
from hicache_backend_file import file_transport as transport_mod

Make = Callable[..., FileTransport]


def test_extension_is_built_in_ci() -> None:
    if os.environ.get("CI"):
        assert transport_mod._fastfs is not None, "hicache_backend_file._fastfs was not compiled"


@pytest.mark.skipif(transport_mod._fastfs is None, reason="the C extension was not compiled here")
def test_c_loop_matches_python_loop(make_transport: Make, root: Path) -> None:
    t = make_transport()
    names = ["a", "ns/m/p/ab/x", "ns/m/p/ab/y", "gone", "ns/none/z", "sub", "link", "fifo", "locked/w"]
    t.write(
        ["a", "ns/m/p/ab/x", "ns/m/p/ab/y"],
        [segs(pattern(1, 10)), segs(pattern(2, 4096)), segs(pattern(3, 0))],
    )
    (root / "sub").mkdir()
    (root / "link").symlink_to(root / "a")
    os.mkfifo(root / "fifo")
    (root / "locked").mkdir()
    (root / "locked" / "w").write_bytes(b"1234")
    os.chmod(root / "locked", 0)  # stat inside fails with EACCES for non-root users only
    try:
        before = dict(t.errors())
        fast = t._stat_sizes(names)
        mid = dict(t.errors())
        slow = t._stat_sizes_py(names)
        after = dict(t.errors())
    finally:
        os.chmod(root / "locked", 0o700)
    assert fast == slow
    assert fast[:6] == [10, 4096, 0, None, None, None] and fast[6:8] == [None, None]
    # errors (if any, e.g. EACCES when not root) are counted the same way by both loops
    grew = lambda a, b: {k: b.get(k, 0) - a.get(k, 0) for k in b if b.get(k, 0) != a.get(k, 0)}  # noqa: E731
    assert grew(before, mid) == grew(mid, after)


@pytest.mark.skipif(transport_mod._fastfs is None, reason="the C extension was not compiled here")
def test_c_loop_argument_errors() -> None:
    fastfs = transport_mod._fastfs
    assert fastfs is not None
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert fastfs.stat_sizes(fd, []) == ([], [])
        with pytest.raises(TypeError, match=r"names\[1\]"):
            fastfs.stat_sizes(fd, ["a", 3])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="NUL"):
            fastfs.stat_sizes(fd, ["a\x00b"])
        sizes, errors = fastfs.stat_sizes(-1, ["x"])  # a bad descriptor is an error, not a crash
        assert sizes == [None] and errors and errors[0][0] == 0
    finally:
        os.close(fd)
