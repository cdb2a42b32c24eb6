"""What the read and write paths of :class:`~.file_transport.FileTransport` share.

:class:`FileBase` declares the state ``FileTransport.__init__`` sets up (the mixins in
:mod:`.reads` and :mod:`.writes` use it, so mypy checks them against one declaration) and
holds the helpers every path needs: failure counting, ``stat`` of one name, and spreading
a batch over the ``io_threads`` pool. :func:`reason_of` maps an ``OSError`` to the reason
counted in :meth:`FileTransport.errors` (unknown errnos, and none, are ``"io"``).
"""

from __future__ import annotations

import errno
import stat
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from hicache_sdk.transport import Segments

from .beneath import Beneath
from .capacity import CapacityLedger
from .config import FileConfig
from .metacache import MetadataCache
from .names import check_names
from .vio import check_segments

__all__ = ["REASONS", "FileBase", "reason_of"]

T = TypeVar("T")

REASONS = {
    errno.ENOENT: "not_found",
    errno.ENOTDIR: "not_found",
    errno.ENOSPC: "disk_full",
    errno.EDQUOT: "disk_full",
    errno.EROFS: "read_only",
    errno.EACCES: "permission",
    errno.EPERM: "permission",
    errno.ELOOP: "not_regular",
    errno.EISDIR: "not_regular",
    errno.ESPIPE: "not_regular",
}


def reason_of(e: OSError) -> str:
    """The counted reason for ``e``: :data:`REASONS` by errno, else ``"io"``."""
    return REASONS.get(e.errno or 0, "io")


class FileBase:
    """State and shared helpers of :class:`~.file_transport.FileTransport` (not used alone:
    ``FileTransport.__init__`` sets every attribute declared here)."""

    config: FileConfig
    root: str
    _root_fd: int  # descriptor of the root; every path is relative to it
    _fs: Beneath  # resolves names beneath _root_fd, never through a symlink
    _closed: bool
    _lock: threading.Lock  # guards the counters and the closed flag
    _errors: dict[str, int]
    metadata_cache: MetadataCache | None
    ledger: CapacityLedger | None  # set when a byte limit is configured
    _pool: ThreadPoolExecutor | None  # io_threads - 1 workers (None: io_threads == 1)

    @staticmethod
    def _check_batch(keys: Sequence[str], buffers: Sequence[Segments]) -> int:
        """Validate a read/write batch before any I/O (``ValueError`` naming the
        argument) and return its size."""
        if len(keys) != len(buffers):
            raise ValueError(f"buffers: expected {len(keys)} entries, got {len(buffers)}")
        check_names(keys)
        check_segments(buffers)
        return len(keys)

    def _count(self, reason: str, n: int = 1) -> None:
        with self._lock:
            self._errors[reason] = self._errors.get(reason, 0) + n

    def _parallel(self, n: int, fn: Callable[[int], T]) -> list[T]:
        """``[fn(i) for i in range(n)]`` spread over the workers and the calling thread."""
        if self._pool is None or n < 2:
            return [fn(i) for i in range(n)]
        parts = min(self.config.io_threads, n)
        bounds = [(n * p // parts, n * (p + 1) // parts) for p in range(parts)]

        def run(lo_hi: tuple[int, int]) -> list[T]:
            return [fn(i) for i in range(*lo_hi)]

        futures = [self._pool.submit(run, b) for b in bounds[1:]]
        out = run(bounds[0])
        for f in futures:
            out.extend(f.result())
        return out

    def _stat_size(self, name: str) -> int | None:
        """The size of ``name`` if it is a regular file (no symlink is followed, on any
        component), else ``None``; a failure other than absence is counted."""
        try:
            st = self._fs.stat(name)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            self._count(reason_of(e))
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None
