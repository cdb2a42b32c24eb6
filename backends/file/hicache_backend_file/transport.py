"""The file transport: one file per object under a root directory.

Names with ``/`` fan out into subdirectories (created on demand, mode ``dir_mode``);
SGLang's flat names stay in the root. Every path is resolved relative to an open
descriptor of the root, and final components are opened with ``O_NOFOLLOW``; names are
validated (:mod:`.names`) before any I/O, so nothing escapes the root.

* ``exists``: ``stat`` without following symlinks; the real size of a regular file, else
  ``None`` (a truncated page is reported with its true size, so the adapter rejects it).
* ``read``: ``open``/``fstat``/``preadv`` straight into the caller's segments; the file's
  size must equal the segments' total, else a miss.
* ``write``: present pages are left alone (``True``); others go to a temporary file in
  their directory and are published without replacement (:func:`.fsops.publish_noreplace`).
* A batch's files are spread over ``io_threads`` workers (the calling thread takes a share).

I/O failures never raise: they give ``None`` / ``False`` and count a reason in
:meth:`FileTransport.errors` (``not_found``, ``size_mismatch``, ``disk_full``,
``read_only``, ``permission``, ``capacity``, ``not_regular``, ``io``; a wrong-size file
found by ``read`` is removed and counted as ``removed_wrong_size``).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import mmap
import os
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ClassVar, TypeVar

from hicache_sdk.capabilities import Capabilities
from hicache_sdk.transport import Segments, Transport

from .capacity import CapacityLedger
from .config import FileConfig, resolve_root
from .fsops import prepare_root, process_umask, publish_noreplace, remove_stale_temps, temp_name, walk_pages
from .metacache import MetadataCache
from .names import check_names, check_prefix
from .vio import (
    DIO_ALIGN,
    IOV_MAX,
    advance,
    aligned_prefix,
    check_segments,
    preadv_exact,
    preadv_nowait,
    pwritev_all,
    segment_arrays,
    segment_views,
    total_bytes,
)

__all__ = ["FileTransport"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_O_DIRECT: int = getattr(os, "O_DIRECT", 0)
_RWF_NOWAIT: int = getattr(os, "RWF_NOWAIT", 0)
_MAX_HELD_FDS = 256  # descriptors pass 1 keeps open for pass 2; beyond, pass 2 reopens
_SPLIT_WARM_AT = 16  # batches this large run pass 1 on two threads
_BOUNCE_MAX = 64 * 1024  # largest unaligned tail read through the O_DIRECT bounce buffer
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_REASONS = {
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


def _reason(e: OSError) -> str:
    return _REASONS.get(e.errno or 0, "io")


class FileTransport(Transport):
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
        scatter_gather=True,
    )

    def __init__(self, config: FileConfig | None = None, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = config = config if config is not None else FileConfig()
        self.root = resolve_root(config, environ)
        prepare_root(self.root, config.dir_mode, config.strict_root)
        self._root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._closed = False
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {}
        self._direct = bool(config.direct_io) and hasattr(os, "O_DIRECT")
        self._direct_bytes = 0
        self._nowait = _RWF_NOWAIT != 0  # RWF_NOWAIT works here (cleared at the first refusal)
        umask = process_umask()
        self._chmod_files = umask is None or bool(config.file_mode & umask)
        self._chmod_dirs = umask is None or bool(config.dir_mode & umask)
        self.metadata_cache = MetadataCache(config.metadata_ttl) if config.enable_metadata_cache else None
        limit = config.byte_limit
        self.ledger: CapacityLedger | None = None
        if limit > 0:
            self.ledger = CapacityLedger(
                self.root,
                limit,
                config.eviction_ratio,
                config.file_mode,
                on_evict=self.metadata_cache.remove if self.metadata_cache is not None else None,
            )
        self._pool = (
            ThreadPoolExecutor(config.io_threads - 1, thread_name_prefix="hicache-file")
            if config.io_threads > 1
            else None
        )
        self._cold_pool = (
            ThreadPoolExecutor(config.cold_read_threads - 1, thread_name_prefix="hicache-file-cold")
            if config.cold_read_threads > 1
            else None
        )
        self._tls = threading.local()
        self._cleanup: Future[int] | None = None
        if self._pool is not None:
            self._cleanup = self._pool.submit(remove_stale_temps, self.root, config.stale_temp_s)
        else:
            remove_stale_temps(self.root, config.stale_temp_s)

    # ------------------------------------------------------------------ bookkeeping

    def _count(self, reason: str, n: int = 1) -> None:
        with self._lock:
            self._errors[reason] = self._errors.get(reason, 0) + n

    def errors(self) -> dict[str, int]:
        """Failures so far by reason (a copy)."""
        with self._lock:
            return dict(self._errors)

    def path_of(self, name: str) -> str:
        """The absolute path of object ``name`` (validated)."""
        check_names([name], "name")
        return os.path.join(self.root, name)

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

    # ------------------------------------------------------------------ exists

    def _stat_size(self, name: str) -> int | None:
        try:
            st = os.stat(name, dir_fd=self._root_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            self._count(_reason(e))
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        """Sizes of present regular files, ``None`` otherwise (symlinks are not pages).
        With the metadata cache, a cached hit skips the ``stat``."""
        check_names(keys)
        if self._closed:
            return [None] * len(keys)
        mc = self.metadata_cache
        if mc is None:
            return self._stat_sizes(keys)
        out = mc.get_many(keys)
        todo = [i for i, size in enumerate(out) if size is None]
        if todo:
            found = self._stat_sizes([keys[i] for i in todo])
            for i, size in zip(todo, found):
                if size is not None:
                    out[i] = size
                    mc.put(keys[i], size)
        return out

    def _stat_sizes(self, keys: Sequence[str]) -> list[int | None]:
        """:meth:`_stat_size` for many names, as one tight loop (this is the whole cost of
        ``exists`` besides the kernel's ``stat``)."""
        out: list[int | None] = []
        append = out.append
        stat_, fd, isreg = os.stat, self._root_fd, stat.S_ISREG
        for k in keys:
            try:
                st = stat_(k, dir_fd=fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                append(None)
                continue
            except OSError as e:
                self._count(_reason(e))
                append(None)
                continue
            append(st.st_size if isreg(st.st_mode) else None)
        return out

    # ------------------------------------------------------------------ read

    def _open_failed(self, name: str, e: OSError) -> None:
        self._count(_reason(e))
        if self.metadata_cache is not None:
            self.metadata_cache.remove(name)

    def _read_one(self, name: str, segs: Segments) -> bool:
        """Open and read one object from scratch (the cold path's fallback)."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self._root_fd)
        except OSError as e:
            self._open_failed(name, e)
            return False
        return self._finish_read(name, segs, fd, None)

    def _finish_read(self, name: str, segs: Segments, fd: int, got: int | None) -> bool:
        """Complete the read of ``name`` from its open descriptor ``fd`` (always closed
        here); ``got`` bytes from offset 0 already arrived (``None``: nothing was tried)."""
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self._count("not_regular")
                return False
            if st.st_size != total_bytes(segs):
                self._count("size_mismatch")
                self._remove_if_same(name, st)
                return False
            if not self._fill(fd, st.st_size, segs, got):
                self._count("size_mismatch")
                return False
            if self.ledger is not None:
                os.utime(fd)  # LRU: a read makes the page recent
            return True
        except OSError as e:
            self._count(_reason(e))
            return False
        finally:
            os.close(fd)

    def _fill(self, fd: int, total: int, segs: Segments, got: int | None) -> bool:
        """Read the rest of a ``total``-byte regular file into ``segs`` (``got`` bytes from
        offset 0 are there already; ``None``: probe the page cache first). ``False`` on a
        short file.

        With ``direct_io``: when the page cache did not hold everything, the
        4 KiB-aligned leading segments are read with ``O_DIRECT`` (switched on for this
        descriptor with ``fcntl``: no page-cache copy, the device DMAs into the caller's
        memory) and an unaligned tail (the SDK trailer) joins that read through an
        aligned bounce buffer; everything else is read buffered."""
        views = segment_views(segs)
        if got is None:
            got = preadv_nowait(fd, views) if self._nowait else 0
            if got == total:
                return True
            if got < 0:  # RWF_NOWAIT unsupported here
                self._nowait = False
                got = 0
        if self._direct:
            count, nbytes = aligned_prefix(segs)
            if nbytes > got and self._set_direct(fd, True):
                try:
                    rest = total - nbytes
                    if 0 < rest <= _BOUNCE_MAX:
                        bounce = self._bounce()
                        size = -(-rest // DIO_ALIGN) * DIO_ALIGN
                        if self._read_direct(fd, [*views[:count], bounce[:size]], total):
                            self._counts_direct(nbytes)
                            pos = 0
                            for v in advance(views, nbytes):
                                v[:] = bounce[pos : pos + v.nbytes]
                                pos += v.nbytes
                            return True
                    elif self._read_direct(fd, views[:count], nbytes):
                        self._counts_direct(nbytes)
                        got = nbytes
                finally:
                    self._set_direct(fd, False)
        return preadv_exact(fd, advance(views, got), got)

    def _bounce(self) -> memoryview:
        """This thread's 4 KiB-aligned bounce buffer for unaligned O_DIRECT tails."""
        buf: memoryview | None = getattr(self._tls, "bounce", None)
        if buf is None:
            buf = self._tls.bounce = memoryview(mmap.mmap(-1, _BOUNCE_MAX))
        return buf

    def _set_direct(self, fd: int, on: bool) -> bool:
        """Switch ``O_DIRECT`` on ``fd`` on or off (off also clears ``O_NONBLOCK``: the
        descriptor is known to be a regular file by now). ``False`` when the file system
        refuses ``O_DIRECT`` (then it is not tried again)."""
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, _O_DIRECT if on else 0)
        except OSError:
            self._direct = False
            return False
        return True

    def _counts_direct(self, nbytes: int) -> None:
        with self._lock:
            self._direct_bytes += nbytes

    def direct_bytes(self) -> int:
        """Bytes read with ``O_DIRECT`` so far (0 when the page cache served everything)."""
        with self._lock:
            return self._direct_bytes

    def _read_direct(self, fd: int, views: list[memoryview], need: int) -> bool:
        """``O_DIRECT`` read (``fd`` has the flag) of aligned ``views`` from offset 0 until
        at least ``need`` bytes arrived (the last view may reach past the end of the
        file). ``False`` (the caller reads buffered) on an error or an early end; an
        ``EINVAL`` (alignment refused) also turns ``O_DIRECT`` off for good."""
        done = 0
        try:
            while done < need:
                n = os.preadv(fd, views[:IOV_MAX], done)
                if n <= 0:
                    return False
                done += n
                views = advance(views, n)
        except OSError as e:
            if e.errno == errno.EINVAL:
                self._direct = False
            return False
        return True

    def _remove_if_same(self, name: str, st: os.stat_result) -> None:
        """Delete a page of the wrong size (truncated, torn or foreign), unless the name
        now holds another file (a concurrent rewrite)."""
        try:
            now = os.stat(name, dir_fd=self._root_fd, follow_symlinks=False)
            if (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                os.unlink(name, dir_fd=self._root_fd)
                self._count("removed_wrong_size")
                if self.ledger is not None:
                    self.ledger.release(st.st_size)
        except OSError:
            pass
        if self.metadata_cache is not None:
            self.metadata_cache.remove(name)

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        """Read each object into its segments; ``False`` for a missing object, a size that
        differs from the segments' total, a non-regular file or an I/O error.

        Every page of a name has one size (the key scheme encodes the geometry), so a file
        of another size is truncated, torn or foreign: it is removed (as the adapter's
        ``exists`` does), unless a concurrent writer replaced it meanwhile.

        Two passes. Pass 1, in the calling thread: ``open`` and one ``preadv(...,
        RWF_NOWAIT)`` of payload, trailer and one extra byte into a sink -- a page the
        page cache holds whole is done (no ``fstat``: a file too long fills the extra
        byte, one too short reads short; a page-multiple size whose extra byte may not be
        cached is checked with ``fstat``). Pass 2, on ``cold_read_threads``: the rest
        (``fstat`` checks, then ``O_DIRECT`` / buffered reads on the same descriptor)."""
        if len(keys) != len(buffers):
            raise ValueError(f"buffers: expected {len(keys)} entries, got {len(buffers)}")
        check_names(keys)
        check_segments(buffers)
        n = len(keys)
        if self._closed:
            return [False] * n
        out = [False] * n
        cold: list[tuple[int, int, int | None]] = []  # (index, open fd or -1, bytes read)
        try:
            half = n // 2 if n >= _SPLIT_WARM_AT and self._cold_pool is not None else n
            if half < n:
                # Two threads on pass 1: one thread's Python work per page hides behind the
                # other's page-cache copy (preadv releases the GIL).
                assert self._cold_pool is not None
                other: list[tuple[int, int, int | None]] = []
                fut = self._cold_pool.submit(self._read_warm, keys, buffers, out, other, half, n)
                try:
                    self._read_warm(keys, buffers, out, cold, 0, half)
                finally:
                    fut.result()
                    cold.extend(other)
            else:
                self._read_warm(keys, buffers, out, cold, 0, n)
        finally:
            if cold:
                self._read_cold(keys, buffers, cold, out)
        return out

    def _read_warm(
        self,
        keys: Sequence[str],
        buffers: Sequence[Segments],
        out: list[bool],
        cold: list[tuple[int, int, int | None]],
        lo: int,
        hi: int,
    ) -> None:
        """Pass 1 of :meth:`read` (see there) over objects ``lo..hi-1``; appends what it
        could not finish to ``cold``."""
        root, flags, sink = self._root_fd, _READ_FLAGS, bytearray(1)
        probe = self._nowait
        cold_seen = False
        touch = self.ledger is not None
        for i in range(lo, hi):
            name, segs = keys[i], buffers[i]
            try:
                fd = os.open(name, flags, dir_fd=root)
            except OSError as e:
                self._open_failed(name, e)
                continue
            held = False
            try:
                arrays, total = segment_arrays(segs)
                if not probe or len(arrays) >= IOV_MAX:
                    if len(cold) < _MAX_HELD_FDS:
                        cold.append((i, fd, 0 if cold_seen else None))
                        held = True
                    else:
                        cold.append((i, -1, None))
                    continue
                try:
                    got = os.preadv(fd, [*arrays, sink], 0, _RWF_NOWAIT)
                except BlockingIOError:
                    got = 0
                if got == total and (total & (DIO_ALIGN - 1) or os.fstat(fd).st_size == total):
                    if touch:
                        os.utime(fd)
                    out[i] = True
                elif got > total:  # too long (or not a file): the checks of pass 2 decide
                    held = True  # _finish_read closes it
                    out[i] = self._finish_read(name, segs, fd, 0)
                else:
                    # A probe of an uncached file starts the kernel's readahead (up to
                    # read_ahead_kb), which the O_DIRECT read would then duplicate: after
                    # the first cold page, the rest of the batch goes to pass 2 unprobed.
                    probe, cold_seen = False, True
                    if len(cold) < _MAX_HELD_FDS:
                        cold.append((i, fd, min(got, total)))
                        held = True
                    else:
                        cold.append((i, -1, None))
            except OSError as e:
                if e.errno in (errno.EOPNOTSUPP, errno.EINVAL) and not held:
                    probe = self._nowait = False  # no RWF_NOWAIT here: pass 2 reads it all
                    cold.append((i, fd, None))
                    held = True
                else:
                    self._count(_reason(e))
            finally:
                if not held:
                    os.close(fd)

    def _read_cold(
        self,
        keys: Sequence[str],
        buffers: Sequence[Segments],
        cold: list[tuple[int, int, int | None]],
        out: list[bool],
    ) -> None:
        """Pass 2 of :meth:`read`: finish ``cold`` on up to ``cold_read_threads`` threads
        (the caller is one), each taking the next page when done with one."""
        items = iter(cold)

        def work() -> None:
            for i, fd, got in items:  # a list iterator hands each item out once
                if fd < 0:
                    out[i] = self._read_one(keys[i], buffers[i])
                else:
                    out[i] = self._finish_read(keys[i], buffers[i], fd, got)

        helpers = min(len(cold) - 1, self.config.cold_read_threads - 1)
        futures = [self._cold_pool.submit(work) for _ in range(helpers)] if self._cold_pool else []
        try:
            work()
        finally:
            for f in futures:
                f.exception()
            for _, fd, _ in items:  # only after an unexpected error: never leak a descriptor
                if fd >= 0:
                    os.close(fd)

    # ------------------------------------------------------------------ write

    def _make_dirs(self, rel_dir: str) -> None:
        path = ""
        for comp in rel_dir.split("/"):
            path = f"{path}/{comp}" if path else comp
            try:
                os.mkdir(path, self.config.dir_mode, dir_fd=self._root_fd)
            except FileExistsError:
                continue
            if self._chmod_dirs:
                os.chmod(path, self.config.dir_mode, dir_fd=self._root_fd)

    def _open_temp(self, rel_dir: str) -> tuple[int, str]:
        tmp = f"{rel_dir}/{temp_name()}" if rel_dir else temp_name()
        try:
            fd = os.open(tmp, _TMP_FLAGS, self.config.file_mode, dir_fd=self._root_fd)
        except FileNotFoundError:
            if not rel_dir:
                raise
            self._make_dirs(rel_dir)
            fd = os.open(tmp, _TMP_FLAGS, self.config.file_mode, dir_fd=self._root_fd)
        return fd, tmp

    def _fsync_dir(self, rel_dir: str) -> None:
        fd = os.open(rel_dir or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self._root_fd)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_one(self, name: str, segs: Segments) -> tuple[bool, bool]:
        """``(ok, published)``: ``published`` is False when the page already existed."""
        rel_dir = name.rpartition("/")[0]
        tmp: str | None = None
        try:
            fd, tmp = self._open_temp(rel_dir)
            try:
                if self._chmod_files:
                    os.fchmod(fd, self.config.file_mode)
                pwritev_all(fd, segment_views(segs))
                if self.config.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            published = publish_noreplace(tmp, name, self._root_fd)
            if published:
                tmp = None
                if self.config.fsync:
                    self._fsync_dir(rel_dir)
                return True, True
            if self._stat_size(name) is None:  # something that is not a page holds the name
                self._count("not_regular")
                return False, False
            return True, False
        except OSError as e:
            self._count(_reason(e))
            return False, False
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp, dir_fd=self._root_fd)
                except OSError:
                    pass

    def _touch(self, name: str) -> None:
        try:
            os.utime(name, dir_fd=self._root_fd, follow_symlinks=False)
        except OSError:
            pass

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        """Create each object unless present (present: ``True``, untouched; with a byte
        limit, its recency is refreshed). ``False`` on I/O failure or when the byte limit
        cannot make room; no partial or temporary file is left behind."""
        if len(keys) != len(buffers):
            raise ValueError(f"buffers: expected {len(keys)} entries, got {len(buffers)}")
        check_names(keys)
        check_segments(buffers)
        n = len(keys)
        if self._closed:
            return [False] * n
        out = [False] * n
        todo: list[int] = []
        for i, k in enumerate(keys):
            if self._stat_size(k) is not None:
                out[i] = True
                if self.ledger is not None:
                    self._touch(k)
            else:
                todo.append(i)
        if not todo:
            return out
        sizes = [total_bytes(buffers[i]) for i in todo]
        reserved = self._reserve_all(sizes)
        if reserved is None:  # per page, as far as room can be made
            reserved = [self._reserve(s) for s in sizes]

        def one(j: int) -> tuple[bool, bool]:
            if not reserved[j]:
                return False, False
            return self._write_one(keys[todo[j]], buffers[todo[j]])

        results = self._parallel(len(todo), one)
        unused = 0
        for j, (ok, published) in enumerate(results):
            i = todo[j]
            out[i] = ok
            if reserved[j] and not published:
                unused += sizes[j]
            if published and self.metadata_cache is not None:
                self.metadata_cache.put(keys[i], sizes[j])
        if unused and self.ledger is not None:
            try:
                self.ledger.release(unused)
            except OSError as e:
                self._count(_reason(e))
        return out

    def _reserve(self, nbytes: int) -> bool:
        if self.ledger is None:
            return True
        try:
            ok = self.ledger.reserve(nbytes)
        except OSError as e:
            self._count(_reason(e))
            return False
        if not ok:
            self._count("capacity")
        return ok

    def _reserve_all(self, sizes: list[int]) -> list[bool] | None:
        if self.ledger is None:
            return [True] * len(sizes)
        try:
            if self.ledger.reserve(sum(sizes)):
                return [True] * len(sizes)
        except OSError:
            pass
        return None

    # ------------------------------------------------------------------ delete / clear

    def delete(self, keys: Sequence[str]) -> None:
        """Remove the objects if present; missing keys and errors are ignored."""
        check_names(keys)
        if self._closed:
            return
        freed = 0
        for k in keys:
            if self.metadata_cache is not None:
                self.metadata_cache.remove(k)
            size = self._stat_size(k) if self.ledger is not None else None
            try:
                os.unlink(k, dir_fd=self._root_fd)
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
        root are never touched. Errors are swallowed."""
        check_prefix(prefix)
        if self._closed:
            return
        start = prefix.rpartition("/")[0]
        for e in list(walk_pages(self.root, start, with_stat=False)):
            if e.name.startswith(prefix):
                try:
                    os.unlink(e.name, dir_fd=self._root_fd)
                except OSError:
                    pass
        if self.metadata_cache is not None:
            self.metadata_cache.clear(prefix)
        if self.ledger is not None:
            try:
                self.ledger.resync()
            except OSError:
                pass

    # ------------------------------------------------------------------ lifecycle

    def health(self) -> bool:
        """The root is still a directory we can write to."""
        if self._closed:
            return False
        try:
            st = os.fstat(self._root_fd)
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) and os.access(self.root, os.W_OK)

    def close(self) -> None:
        """Stop the workers and release the root descriptor. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for pool in (self._pool, self._cold_pool):
            if pool is not None:
                pool.shutdown(wait=True)
        if self.ledger is not None:
            self.ledger.close()
        os.close(self._root_fd)
