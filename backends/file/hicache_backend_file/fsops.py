"""File-system helpers: the root directory check, temporary files, no-replace publish,
stale-temporary cleanup and the page walk.

Publication: a page is written to a temporary file in its own directory, then published
with ``renameat2(RENAME_NOREPLACE)`` (one atomic step that never replaces an existing
page); where the file system lacks it, ``link`` + ``unlink`` gives the same guarantee
(the page appears whole or not at all; a crash between the two leaves only a stale
temporary file). A writer killed at any point therefore leaves either a complete page or
a temporary file, never a partial page.

Temporary names are ``.<host>-<pid>-<random>.tmp`` (hidden, so never a valid page name),
which lets the cleaner prove a writer on this host dead. SGLang's ``.<uuid>.tmp`` names
are cleaned by age only.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import socket
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hicache_sdk.errors import ConfigError

from .beneath import Beneath
from .names import TEMP_SUFFIX, is_page_name

__all__ = [
    "RWF_NOWAIT",
    "probe_nowait",
    "touch_fd",
    "PageEntry",
    "RootError",
    "is_temp_name",
    "prepare_root",
    "process_umask",
    "publish_noreplace",
    "remove_stale_temps",
    "temp_name",
    "walk_pages",
]

_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100

_renameat2: Any = None
try:
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    _renameat2.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
    _renameat2 = None

_renameat2_ok = _renameat2 is not None


class RootError(ConfigError):
    """The root directory is unsafe (foreign owner, writable by others) or unusable (a
    :class:`~hicache_sdk.errors.ConfigError`, so also a ``ValueError``; the message names
    ``root``)."""


def prepare_root(root: str, dir_mode: int, strict: bool = True) -> None:
    """Create ``root`` (mode ``dir_mode``) if absent and check it.

    Refused (``RootError``) when it is not a directory, or, with ``strict``, when another
    user owns it (or owns the symlink that names it) or others may write it. A root
    planted by another user in a shared ``/tmp`` is exactly that case.
    """
    try:
        os.makedirs(os.path.dirname(root) or "/", exist_ok=True)
        try:
            os.mkdir(root, dir_mode)
            os.chmod(root, dir_mode)
        except FileExistsError:
            pass
        lst = os.lstat(root)
        st = os.stat(root)
    except OSError as e:
        raise RootError(f"root directory {root!r} is unusable: {e.strerror}") from e
    if not stat.S_ISDIR(st.st_mode):
        raise RootError(f"root {root!r} is not a directory")
    if strict:
        me = os.geteuid()
        checks = [("symlink", lst)] if stat.S_ISLNK(lst.st_mode) else []
        for what, s in [*checks, ("directory", st)]:
            if s.st_uid != me:
                raise RootError(
                    f"root {what} {root!r} is owned by uid {s.st_uid}, not by this user ({me}); "
                    "choose another root or set strict_root=false to share it deliberately"
                )
        if st.st_mode & stat.S_IWOTH:
            raise RootError(
                f"root directory {root!r} is writable by others (mode {oct(st.st_mode & 0o7777)}); "
                "chmod o-w it or choose another root"
            )


def temp_name() -> str:
    """A fresh temporary file name (a basename) carrying this host and pid."""
    return f".{_HOST}-{os.getpid()}-{uuid.uuid4().hex}{TEMP_SUFFIX}"


def is_temp_name(basename: str) -> bool:
    return basename.startswith(".") and basename.endswith(TEMP_SUFFIX)


def _writer_alive(basename: str) -> bool | None:
    """``False``: the name is ours, from this host, and its pid is gone. ``True``: that
    pid is alive. ``None``: cannot tell (another host, SGLang's name)."""
    parts = basename[1 : -len(TEMP_SUFFIX)].split("-")
    if len(parts) != 3 or parts[0] != _HOST or not parts[1].isdigit():
        return None
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def publish_noreplace(tmp_path: str, final_path: str, dir_fd: int = _AT_FDCWD) -> bool:
    """Atomically give the complete file ``tmp_path`` the name ``final_path`` (both
    relative to ``dir_fd`` unless absolute) unless that name exists. ``True``: published.
    ``False``: a page was already there (``tmp_path`` is left for the caller to remove).
    Other failures raise ``OSError``."""
    global _renameat2_ok
    if _renameat2_ok and _renameat2 is not None:
        rc = _renameat2(dir_fd, os.fsencode(tmp_path), dir_fd, os.fsencode(final_path), _RENAME_NOREPLACE)
        if rc == 0:
            return True
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            return False
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), final_path)
        _renameat2_ok = False  # this file system cannot; use link + unlink from now on
    fd_arg = None if dir_fd == _AT_FDCWD else dir_fd
    try:
        os.link(tmp_path, final_path, src_dir_fd=fd_arg, dst_dir_fd=fd_arg, follow_symlinks=False)
    except FileExistsError:
        return False
    os.unlink(tmp_path, dir_fd=fd_arg)
    return True


def process_umask() -> int | None:
    """This process's umask read without changing it (``None`` when unknown)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return None


@dataclass(frozen=True)
class PageEntry:
    """A page file found by :func:`walk_pages`: object name, size and mtime (ns)."""

    name: str
    size: int
    mtime_ns: int


def walk_pages(
    fs: Beneath,
    start: str = "",
    on_temp: Callable[[int, os.DirEntry[str]], None] | None = None,
    with_stat: bool = True,
) -> Iterator[PageEntry]:
    """Yield every page file (a regular file with a valid name; symlinks and hidden files
    are not pages) under ``start`` (a directory name relative to ``fs``'s root); without
    ``with_stat`` size and mtime are 0. ``on_temp(dir_fd, entry)`` sees temporary files
    (``dir_fd``: their directory, open during the call). Every directory is opened
    beneath the root with no symlink followed (``start`` included), so the walk never
    leaves the root. Directories that vanish or cannot be opened are skipped."""
    stack = [start.rstrip("/")]
    while stack:
        rel = stack.pop()
        try:
            dfd = fs.open_dir(rel, readable=True)
        except OSError:
            continue
        try:
            with os.scandir(dfd) as it:
                for e in it:
                    name = f"{rel}/{e.name}" if rel else e.name
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if not e.name.startswith("."):
                                stack.append(name)
                        elif e.is_file(follow_symlinks=False):
                            if is_temp_name(e.name):
                                if on_temp is not None:
                                    on_temp(dfd, e)
                            elif is_page_name(name):
                                if with_stat:
                                    st = e.stat(follow_symlinks=False)
                                    yield PageEntry(name, st.st_size, st.st_mtime_ns)
                                else:
                                    yield PageEntry(name, 0, 0)
                    except OSError:
                        continue
        except OSError:
            continue
        finally:
            os.close(dfd)


def remove_stale_temps(fs: Beneath, max_age_s: float, now: float | None = None) -> int:
    """Remove temporary files whose writer is provably dead (ours, this host, pid gone),
    and, when the writer cannot be identified (another host, SGLang's names), those older
    than ``max_age_s``. A provably live writer's file is never removed. Returns the number
    removed. Never raises for I/O errors."""
    removed = 0
    t = time.time() if now is None else now

    def on_temp(dir_fd: int, e: os.DirEntry[str]) -> None:
        nonlocal removed
        try:
            alive = _writer_alive(e.name)
            if alive is None:
                alive = t - e.stat(follow_symlinks=False).st_mtime <= max_age_s
            if not alive:
                os.unlink(e.name, dir_fd=dir_fd)
                removed += 1
        except OSError:
            pass

    for _ in walk_pages(fs, on_temp=on_temp, with_stat=False):
        pass
    return removed


#: ``preadv`` flag: fail with ``EAGAIN`` instead of waiting for the disk (0: unsupported).
RWF_NOWAIT: int = getattr(os, "RWF_NOWAIT", 0)


def touch_fd(fd: int) -> None:
    """Make the page recent for LRU eviction (best effort: a read-only root keeps the old
    time, and the read still succeeds)."""
    try:
        os.utime(fd)
    except OSError:
        pass


def probe_nowait(root_fd: int) -> bool:
    """Whether ``preadv(..., RWF_NOWAIT)`` works on the root's file system, tried once on
    an unlinked temporary file of our own. A root where no file can be created (read
    only) trusts the kernel's flag: should a file refuse it, that file is read by pass 2."""
    if not RWF_NOWAIT:
        return False
    name = temp_name()
    try:
        fd = os.open(
            name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=root_fd
        )
    except OSError:
        return True
    try:
        try:
            os.unlink(name, dir_fd=root_fd)
            os.write(fd, bytes(16))
            os.preadv(fd, [bytearray(16)], 0, RWF_NOWAIT)
        except BlockingIOError:
            pass
        except OSError as e:
            return e.errno not in (errno.EOPNOTSUPP, errno.EINVAL)
        return True
    finally:
        os.close(fd)
