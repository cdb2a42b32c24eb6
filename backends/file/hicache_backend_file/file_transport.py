"""The file transport: one file per object under a root directory.

Names with ``/`` fan out into subdirectories (created on demand, mode ``dir_mode``);
SGLang's flat names stay in the root. Every path is resolved relative to an open
descriptor of the root with no symlink followed on any component (:mod:`.beneath`:
``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, else an ``O_NOFOLLOW`` walk);
names are validated (:mod:`.names`) before any I/O, so nothing the backend opens, walks
or deletes resolves outside the root.

A read-only root (read-only mount, or a directory this process may not write) is
accepted: construction logs one WARNING, ``health()`` stays true (it checks that the
root can be read), pages already there are served, and each write fails with a counted
reason (``read_only`` on a read-only mount, ``permission`` otherwise); no byte-limit
ledger is kept.

:class:`FileTransport` assembles the paths and owns the state, ``exists``, ``delete`` /
``clear`` and the lifecycle; the shared state and helpers are in :mod:`.base`.

* ``exists``: ``stat`` without following symlinks; the real size of a regular file, else
  ``None`` (a truncated page is reported with its true size, so the adapter rejects it).
  With the metadata cache, a cached size skips the ``stat``.
* ``read`` (:mod:`.reads`): two passes -- pages the page cache holds whole are read in the
  calling thread with one ``open`` + ``preadv(RWF_NOWAIT)`` each (with
  ``cold_read_threads > 1``, a batch of 16 or more splits this pass over two threads);
  the rest go to ``cold_read_threads`` threads (``fstat`` checks, then ``O_DIRECT`` for
  aligned segments, buffered for the rest). The file's size must equal the segments'
  total, else a miss.
* ``write`` (:mod:`.writes`): present pages are left alone (``True``); others go to a
  temporary file in their directory and are published without replacement
  (:func:`.fsops.publish_noreplace`), spread over ``io_threads`` workers (the calling
  thread takes a share).

I/O failures never raise: they give ``None`` / ``False`` and count a reason in
:meth:`FileTransport.errors` (``not_found``, ``size_mismatch``, ``disk_full``,
``read_only``, ``permission``, ``capacity``, ``not_regular``, ``io``; a wrong-size file
found by ``read`` is removed and counted as ``removed_wrong_size``).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ClassVar

from hicache_sdk.capabilities import Capabilities
from hicache_sdk.kit import FanOut
from hicache_sdk.transport import Transport

from .base import reason_of
from .beneath import Beneath
from .capacity import CapacityLedger
from .config import FileConfig, resolve_root
from .fsops import prepare_root, process_umask, remove_stale_temps, walk_pages
from .names import check_names, check_prefix
from .ranges import RangePath
from .reads import ReadPath, probe_nowait
from .writes import WritePath

__all__ = ["FileTransport"]

log = logging.getLogger(__name__)

#: The most directory descriptors one ``exists`` call holds (the default scheme spreads a
#: pool's pages over 256 fan-out directories).
_MAX_DIRS = 1024


#: A directory opened for ``fstatat`` only: never through a symlink (``O_NOFOLLOW`` with
#: ``O_DIRECTORY`` refuses one with ``ENOTDIR``).
_DIR_PATH_FLAGS = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)


def _open_dir(root: int, rel: str, dirs: dict[str, int | OSError]) -> int | OSError:
    """Directory ``rel`` (a validated name's directory part) opened beneath ``root``: its
    last component relative to its parent, found (or opened) the same way in ``dirs``,
    where every level is kept. The descriptor, or the ``OSError`` that stopped the walk."""
    parent, _, comp = rel.rpartition("/")
    pfd = root
    if parent:
        got = dirs.get(parent)
        pfd_or_err = got if got is not None else _open_dir(root, parent, dirs)
        if isinstance(pfd_or_err, OSError):
            dirs[rel] = pfd_or_err
            return pfd_or_err
        pfd = pfd_or_err
    try:
        fd: int | OSError = os.open(comp, _DIR_PATH_FLAGS, dir_fd=pfd)
    except OSError as e:
        fd = e
    dirs[rel] = fd
    return fd


def _close_dirs(dirs: dict[str, int | OSError]) -> None:
    """Close the descriptors of ``dirs`` and empty it."""
    for fd in dirs.values():
        if type(fd) is int:
            os.close(fd)
    dirs.clear()


def _is_read_only(root_fd: int) -> bool:
    """The root's file system is mounted read-only, or this process may not write the
    root directory (decided once, at construction)."""
    try:
        if os.fstatvfs(root_fd).f_flag & os.ST_RDONLY:
            return True
        return not os.access(".", os.W_OK, dir_fd=root_fd, effective_ids=True)
    except (OSError, NotImplementedError):
        return False


class FileTransport(RangePath, ReadPath, WritePath, Transport):
    """Pages as files under ``root`` (see the module docs). Thread-safe.

    ``config`` is a :class:`FileConfig`; ``environ`` (default ``os.environ``) is consulted
    for SGLang's directory variable. Raises :class:`~.fsops.RootError` (a ``ValueError``)
    for an unsafe or unusable root.
    """

    # capacity_bound: a configured byte limit (max_bytes / max_size) is enforced with LRU
    # eviction; without one nothing is ever evicted, so `eviction` stays undeclared.
    capabilities: ClassVar[Capabilities] = Capabilities(
        persistent=True,
        shared_across_processes=True,
        capacity_bound=True,
        delete=True,
        health=True,
    )

    def __init__(self, config: FileConfig | None = None, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = config = config if config is not None else FileConfig()
        self.root = resolve_root(config, environ)
        prepare_root(self.root, config.dir_mode, config.strict_root)
        self._root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._fs = Beneath(self._root_fd)
        self.read_only = _is_read_only(self._root_fd)
        if self.read_only:
            log.warning(
                "file backend root %r is read-only: pages already there are served; "
                "every write fails (counted as read_only)",
                self.root,
            )
        self._closed = False
        self._lock = threading.Lock()
        self._direct = bool(config.direct_io) and hasattr(os, "O_DIRECT")
        self._direct_bytes = 0
        self._nowait = probe_nowait(self._root_fd)  # decided once, here
        umask = process_umask()
        self._chmod_files = umask is None or bool(config.file_mode & umask)
        self._chmod_dirs = umask is None or bool(config.dir_mode & umask)
        limit, min_free = config.byte_limit, config.min_free_bytes
        self.ledger = None
        if (limit > 0 or min_free > 0) and not self.read_only:  # nothing is ever written
            self.ledger = CapacityLedger(
                self.root,
                limit,
                config.eviction_ratio,
                config.file_mode,
                min_free=min_free,
                fs=self._fs,
            )
        self._fan = FanOut(config.io_threads, "hicache-file")
        self._cold_pool = (
            ThreadPoolExecutor(config.cold_read_threads - 1, thread_name_prefix="hicache-file-cold")
            if config.cold_read_threads > 1
            else None
        )
        self._tls = threading.local()
        self._cleanup: Future[int] | None = None
        if self._cold_pool is not None and config.io_threads > 1:  # in the background (io_threads 1: inline)
            self._cleanup = self._cold_pool.submit(remove_stale_temps, self._fs, config.stale_temp_s)
        else:
            remove_stale_temps(self._fs, config.stale_temp_s)

    # ------------------------------------------------------------------ bookkeeping

    def errors(self) -> dict[str, int]:
        """Failures so far by reason (a copy of :attr:`failures`, the kit's sink)."""
        return self.failures.snapshot()

    @staticmethod
    def check_names(names: Sequence[str]) -> None:
        """The object-name rule of this transport (:mod:`.names`), the hook a key scheme
        asks (``KeyScheme.bind_transport``) so that a page whose name could not be
        stored is refused at the API boundary: ``ValueError`` naming the first refused
        name. No I/O."""
        check_names(names, "names")

    # ------------------------------------------------------------------ exists

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        """Sizes of present regular files, ``None`` otherwise (symlinks are not pages).
        SGLang's metadata cache (``enable_metadata_cache``) is the kit's
        :class:`~hicache_sdk.kit.existence.CachedExistence` in front of this transport."""
        check_names(keys)
        if self._closed:
            return [None] * len(keys)
        return self._stat_sizes(keys)

    def _stat_sizes(self, keys: Sequence[str]) -> list[int | None]:
        """:meth:`_stat_size` for many names in one loop: ``fstatat`` of each name's last
        component (``AT_SYMLINK_NOFOLLOW``) relative to its directory. Directories are
        opened once per call and shared by every name below them, each with one
        ``O_NOFOLLOW`` open of its last component relative to its parent's descriptor
        (the walk of :mod:`.beneath`, every level cached): nothing resolves through a
        symlink. Absence (``ENOENT``, ``ENOTDIR``, on the name or a directory: a symlink
        planted as a directory reads as ``ENOTDIR``) is ``None`` uncounted; any other
        failure is ``None`` and counted."""
        out: list[int | None] = []
        append = out.append
        stat_, isreg, root = os.stat, stat.S_ISREG, self._root_fd
        dirs: dict[str, int | OSError] = {}  # directory -> descriptor, or why it failed
        try:
            for k in keys:
                head, _, base = k.rpartition("/")
                if head:
                    pfd = dirs.get(head)
                    if pfd is None:
                        if len(dirs) >= _MAX_DIRS:
                            _close_dirs(dirs)
                        pfd = _open_dir(root, head, dirs)
                    if isinstance(pfd, OSError):
                        if not isinstance(pfd, (FileNotFoundError, NotADirectoryError)):
                            self._count(reason_of(pfd))
                        append(None)
                        continue
                else:
                    pfd = root
                try:
                    st = stat_(base, dir_fd=pfd, follow_symlinks=False)
                except (FileNotFoundError, NotADirectoryError):
                    append(None)
                    continue
                except OSError as e:
                    self._count(reason_of(e))
                    append(None)
                    continue
                append(st.st_size if isreg(st.st_mode) else None)
        finally:
            _close_dirs(dirs)
        return out

    # ------------------------------------------------------------------ delete / clear

    def delete(self, keys: Sequence[str]) -> None:
        """Remove the objects if present; missing keys and errors are ignored."""
        check_names(keys)
        if self._closed:
            return
        freed = 0
        for k in keys:
            size = self._stat_size(k) if self.ledger is not None else None
            try:
                self._fs.unlink(k)
            except OSError:
                continue
            freed += size or 0
        if freed and self.ledger is not None:
            try:
                self.ledger.release(freed)
            except OSError:
                pass

    def clear(self, prefix: str = "") -> None:
        """Remove every page file whose name starts with ``prefix`` (``""``: every page
        under the root). Temporary files, the ledger, symlinks and anything outside the
        root are never touched: the walk and every unlink resolve beneath the root and
        follow no symlink, not even one planted as a top-level directory. Errors are
        swallowed."""
        check_prefix(prefix)
        if self._closed:
            return
        start = prefix.rpartition("/")[0]
        for e in list(walk_pages(self._fs, start, with_stat=False)):
            if e.name.startswith(prefix):
                try:
                    self._fs.unlink(e.name)
                except OSError:
                    pass
        if self.ledger is not None:
            try:
                self.ledger.resync()
            except OSError:
                pass

    # ------------------------------------------------------------------ lifecycle

    def health(self) -> bool:
        """The root is still a directory we can read pages from (a read-only root is
        healthy: it serves reads, and its writes fail one by one, counted)."""
        if self._closed:
            return False
        try:
            st = os.fstat(self._root_fd)
            os.stat(".", dir_fd=self._root_fd)  # the descriptor still resolves
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) and st.st_nlink > 0 and os.access(self.root, os.R_OK | os.X_OK)

    def close(self) -> None:
        """Stop the workers and release the root descriptor. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._fan.close()
        if self._cold_pool is not None:
            self._cold_pool.shutdown(wait=True)
        if self.ledger is not None:
            self.ledger.close()
        os.close(self._root_fd)
