"""A byte limit on all pages under a root, and a free-space watermark on its file system,
shared by every process using the directory.

State lives in the root itself: a hidden ledger file ``.hicache-capacity`` holds the
bytes in use (8 bytes, little-endian) and is the ``flock`` that serializes reservations
and evictions across processes (a ``threading.Lock`` does so within one).

* A writer reserves a batch's bytes *before* writing it. When the reservation would
  exceed the limit, the ledger holder walks the root, recomputes the true usage (drift
  from crashes or deletions is corrected here), and removes the least recently used pages
  (oldest mtime; reads refresh it) until usage plus the batch is at most
  ``limit * eviction_ratio``. The rescan cannot see batches other processes reserved but
  have not yet published (they are temporary files), so usage can exceed the limit by
  the in-flight batch of each *other* writer (with two processes: at most one batch).
* Pages being written are temporary files, invisible to the walk, so an in-flight write
  is never evicted. A page evicted while another process reads it stays readable
  through the open descriptor (POSIX unlink semantics).
* A reservation of a page that turned out to exist already, or failed, is released.
* The free-space watermark (``min_free``, SGLang's ``min_free_space``) turns into a limit
  at each reservation: the pages we hold plus the file system's free space, minus the
  watermark (``statvfs``, space available to unprivileged users). The smaller of that
  and the byte limit applies.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import threading
from collections.abc import Callable

from .beneath import Beneath
from .fsops import RootError, walk_pages

__all__ = ["LEDGER_NAME", "CapacityLedger"]

LEDGER_NAME = ".hicache-capacity"
_FMT = struct.Struct("<q")


class CapacityLedger:
    """Reservations against ``limit`` bytes of pages under ``root``.

    ``on_evict(name)`` is called for every page removed (the metadata cache drops it).
    Construction walks the root once to seed the ledger with the true usage.
    """

    def __init__(
        self,
        root: str,
        limit: int,
        eviction_ratio: float = 0.9,
        file_mode: int = 0o600,
        on_evict: Callable[[str], None] | None = None,
        min_free: int = 0,
        fs: Beneath | None = None,
    ) -> None:
        if limit < 0 or min_free < 0 or (limit == 0 and min_free == 0):
            raise ValueError(f"need a limit > 0 or min_free > 0, got limit={limit!r}, min_free={min_free!r}")
        self.root = root
        self.limit = limit  # 0: no byte limit (the watermark alone applies)
        self.min_free = min_free
        self.ratio = eviction_ratio
        self.on_evict = on_evict
        self.evicted = 0
        self._lock = threading.Lock()
        self._own_root_fd = -1
        if fs is None:
            self._own_root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fs = Beneath(self._own_root_fd)
        self._fs = fs
        self._fd = -1
        try:
            self._fd = _open_ledger(fs.root_fd, os.path.join(root, LEDGER_NAME), file_mode)
            with self._locked():
                self._write(self._scan_total())
        except BaseException:
            self.close()
            raise

    def _locked(self) -> _Held:
        return _Held(self)

    def _read(self) -> int:
        raw = os.pread(self._fd, _FMT.size, 0)
        return _FMT.unpack(raw)[0] if len(raw) == _FMT.size else 0

    def _write(self, used: int) -> None:
        os.pwrite(self._fd, _FMT.pack(max(0, used)), 0)

    def _scan_total(self) -> int:
        return sum(e.size for e in walk_pages(self._fs))

    def used(self) -> int:
        """Bytes in use according to the ledger."""
        with self._locked():
            return self._read()

    def reserve(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` for pages about to be written, evicting LRU pages if needed.
        ``False`` when it cannot fit (larger than the limit, or eviction freed too little).
        ``OSError`` on ledger I/O failure."""
        if nbytes <= 0:
            return True
        if self.limit and nbytes > self.limit:
            return False
        with self._locked():
            used = self._read()
            limit = self._limit_now(used)
            if used + nbytes > limit:
                used = self._evict(int(limit * self.ratio) - nbytes)
                limit = self._limit_now(used)
                if used + nbytes > limit:
                    self._write(used)
                    return False
            self._write(used + nbytes)
            return True

    def _limit_now(self, used: int) -> int:
        """The limit in force with ``used`` bytes held: the byte limit, lowered by the
        free-space watermark (what we hold plus what is free, minus the watermark)."""
        limit = self.limit if self.limit else 1 << 62
        if self.min_free:
            st = os.statvfs(self.root)
            limit = min(limit, used + st.f_bavail * st.f_frsize - self.min_free)
        return limit

    def release(self, nbytes: int) -> None:
        """Give back reserved bytes that were not written, or bytes of deleted pages."""
        if nbytes <= 0:
            return
        with self._locked():
            self._write(self._read() - nbytes)

    def resync(self) -> int:
        """Recompute usage from the directory (after ``clear``); returns it."""
        with self._locked():
            total = self._scan_total()
            self._write(total)
            return total

    def _evict(self, target: int) -> int:
        """Remove oldest pages until usage <= ``target``; return the new usage."""
        entries = list(walk_pages(self._fs))
        used = sum(e.size for e in entries)
        if used <= target:
            return used
        entries.sort(key=lambda e: e.mtime_ns)
        for e in entries:
            if used <= target:
                break
            try:
                self._fs.unlink(e.name)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            used -= e.size
            self.evicted += 1
            if self.on_evict is not None:
                self.on_evict(e.name)
        return used

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if self._own_root_fd >= 0:
                os.close(self._own_root_fd)
                self._own_root_fd = -1


def _open_ledger(root_fd: int, path: str, file_mode: int) -> int:
    """Open (create) the ledger file in the root. Anything but a regular file there -- a
    FIFO, a device, a directory, a symlink -- is refused with a ``RootError`` naming the
    path and what was found (a FIFO would otherwise fail every access with a bare
    ``Illegal seek``); an ``OSError`` names the path too."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(LEDGER_NAME, flags, file_mode, dir_fd=root_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR):
            kind = "a symlink" if e.errno == errno.ELOOP else "a directory"
            raise RootError(f"capacity ledger {path!r} is {kind}, not a regular file; remove it") from e
        raise OSError(e.errno, f"capacity ledger {path!r}: {e.strerror}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RootError(f"capacity ledger {path!r} is {_kind(st.st_mode)}, not a regular file; remove it")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return what
    return "something else"


class _Held:
    """Context manager: the thread lock, then the cross-process ``flock``."""

    def __init__(self, ledger: CapacityLedger) -> None:
        self.ledger = ledger

    def __enter__(self) -> None:
        self.ledger._lock.acquire()
        try:
            if self.ledger._fd < 0:
                raise OSError("capacity ledger is closed")
            fcntl.flock(self.ledger._fd, fcntl.LOCK_EX)
        except BaseException:
            self.ledger._lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            if self.ledger._fd >= 0:
                fcntl.flock(self.ledger._fd, fcntl.LOCK_UN)
        finally:
            self.ledger._lock.release()
