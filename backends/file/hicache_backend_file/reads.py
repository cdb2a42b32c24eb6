"""The read path of :class:`~.file_transport.FileTransport` (the :class:`ReadPath` mixin).

Two passes (:meth:`ReadPath.read` has the details). Pass 1, in the calling thread (with
``cold_read_threads > 1``, a batch of at least ``_SPLIT_WARM_AT`` pages is shared with one
pool thread, both taking the next pages as they go): ``open`` and one ``preadv(..., RWF_NOWAIT)`` of the whole page plus
one extra byte; a page the page cache holds whole is done there without ``fstat``. After
the first page that is not fully cached, the rest of the batch skips the probe (it would
start readahead that the ``O_DIRECT`` read duplicates). Pass 2, on ``cold_read_threads``
threads (the caller is one): ``fstat`` checks on the descriptor pass 1 kept open (at most
``_MAX_HELD_FDS``; beyond, the name is reopened), then ``O_DIRECT`` switched on for that
descriptor to read the 4 KiB-aligned leading segments (an unaligned tail of up to
``_BOUNCE_MAX`` bytes joins through a per-thread bounce buffer), buffered ``preadv`` for
whatever is left.

The file's size must equal the segments' total, else a miss; a file of another size is
removed (``removed_wrong_size``) unless a concurrent writer replaced it meanwhile.
Failures never raise: ``False`` and a counted reason. A file system refusing ``O_DIRECT``
(or an alignment it rejects) is detected once and then read buffered;
``direct_io=False`` reads buffered throughout. Whether ``RWF_NOWAIT`` works is decided
once, at start, by :func:`probe_nowait` on a file of our own; a refusal for one object
afterwards (``EOPNOTSUPP`` on a directory planted under a page name) sends that object to
pass 2 (a miss when it is not a page) and never turns the fast path off.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import queue
import stat
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from hicache_sdk.transport import Segments

from .base import FileBase, reason_of
from .fsops import RWF_NOWAIT, probe_nowait, touch_fd
from .vio import (
    DIO_ALIGN,
    IOV_MAX,
    advance,
    aligned_prefix,
    preadv_exact,
    preadv_nowait,
    segment_arrays,
    segment_views,
    total_bytes,
)

__all__ = ["ReadPath", "probe_nowait"]

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_O_DIRECT: int = getattr(os, "O_DIRECT", 0)
_MAX_HELD_FDS = 256  # descriptors pass 1 keeps open for pass 2; beyond, pass 2 reopens
_SPLIT_WARM_AT = 16  # batches this large offer pass 1 to a second thread
_BOUNCE_MAX = 64 * 1024  # largest unaligned tail read through the O_DIRECT bounce buffer


class ReadPath(FileBase):
    """The read half of :class:`~.file_transport.FileTransport`: ``read`` and ``direct_bytes``."""

    _direct: bool  # O_DIRECT is tried (cleared when the file system refuses it)
    _direct_bytes: int
    _nowait: bool  # RWF_NOWAIT is tried (decided once, at start, by probe_nowait)
    _cold_pool: ThreadPoolExecutor | None  # cold_read_threads - 1 workers
    _tls: threading.local  # per-thread bounce buffer

    def _open_failed(self, name: str, e: OSError) -> None:
        self._count(reason_of(e))

    def _read_one(self, name: str, segs: Segments) -> bool:
        """Open and read one object from scratch (the cold path's fallback)."""
        try:
            fd = self._fs.open(name, _READ_FLAGS)
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
                touch_fd(fd)  # LRU: a read makes the page recent
            return True
        except OSError as e:
            self._count(reason_of(e))
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
            if got < 0:  # refused for this file only: support was decided at start
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
            now = self._fs.stat(name)
            if (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                self._fs.unlink(name)
                self._count("removed_wrong_size")
                if self.ledger is not None:
                    self.ledger.release(st.st_size)
        except OSError:
            pass

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
        cached is checked with ``fstat``). A batch of ``_SPLIT_WARM_AT`` or more pages
        offers pass 1 to one pool thread too: both take the next pages from one shared
        position, so a helper that starts late (a busy machine) only takes what is left
        and the caller never waits for it to begin. Pass 2, on ``cold_read_threads``: the
        rest (``fstat`` checks, then ``O_DIRECT`` / buffered reads on the same
        descriptor)."""
        n = self._check_batch(keys, buffers)
        if self._closed:
            return [False] * n
        out = [False] * n

        def finish(item: tuple[int, int, int | None]) -> None:
            i, fd, got = item
            if fd < 0:
                out[i] = self._read_one(keys[i], buffers[i])
            else:
                out[i] = self._finish_read(keys[i], buffers[i], fd, got)

        cold = _ColdPipe(finish, self._cold_pool, self.config.cold_read_threads - 1)
        batch = _WarmBatch(keys, buffers, out, cold, self._nowait)
        try:
            pool = self._cold_pool
            if n >= _SPLIT_WARM_AT and pool is not None:
                # One thread's Python work per page hides behind the other's page-cache
                # copy (preadv releases the GIL).
                helper = pool.submit(self._read_warm, batch)
                try:
                    self._read_warm(batch)
                finally:
                    batch.stop()
                    if not helper.cancel():  # it started: let it finish the page it holds
                        helper.result()
            else:
                self._read_warm(batch)
        finally:
            cold.finish()
        return out

    def _read_warm(self, batch: _WarmBatch) -> None:
        """Pass 1 of :meth:`read` (see there) over the pages :meth:`_WarmBatch.claim`
        hands this thread; what it cannot finish goes to ``batch.cold`` (pass 2, which
        starts at once)."""
        open_ = self._fs.opener(_READ_FLAGS)
        keys, buffers, out, cold = batch.keys, batch.buffers, batch.out, batch.cold
        sink, fstat, preadv, close = bytearray(1), os.fstat, os.preadv, os.close
        touch = self.ledger is not None
        while (span := batch.claim()) is not None:
            for i in range(*span):
                name, segs = keys[i], buffers[i]
                try:
                    fd = open_(name)
                except OSError as e:
                    self._open_failed(name, e)
                    continue
                held = False
                try:
                    arrays, total = segment_arrays(segs, sink)
                    if not batch.probe or len(arrays) > IOV_MAX:
                        held = self._hand_over(batch, i, fd, 0 if batch.cold_seen else None)
                        continue
                    try:
                        got = preadv(fd, arrays, 0, RWF_NOWAIT)
                    except BlockingIOError:
                        got = 0
                    if got == total and (total & (DIO_ALIGN - 1) or fstat(fd).st_size == total):
                        if touch:
                            touch_fd(fd)
                        out[i] = True
                    elif got > total:  # too long (or not a file): the checks of pass 2 decide
                        held = True  # _finish_read closes it
                        out[i] = self._finish_read(name, segs, fd, 0)
                    else:
                        # A probe of an uncached file starts the kernel's readahead (up to
                        # read_ahead_kb: 8 MiB on a virtio disk, a whole large page), which
                        # the O_DIRECT read would then duplicate: after the first cold page,
                        # the rest of the batch goes to pass 2 unprobed.
                        batch.probe, batch.cold_seen = False, True
                        held = self._hand_over(batch, i, fd, min(got, total))
                except OSError as e:
                    if e.errno in (errno.EOPNOTSUPP, errno.EINVAL) and not held:
                        # Refused for this object only (a directory planted under a page name,
                        # a file on another file system): pass 2 checks and reads it. Support
                        # was decided once, at start (probe_nowait); one object never turns
                        # the fast path off for the others.
                        cold.append((i, fd, None))
                        held = True
                    else:
                        self._count(reason_of(e))
                finally:
                    if not held:
                        close(fd)

    @staticmethod
    def _hand_over(batch: _WarmBatch, i: int, fd: int, got: int | None) -> bool:
        """Give page ``i`` to pass 2 with its open descriptor (``got`` bytes from offset 0
        already read; ``None``: nothing tried), or without it (pass 2 reopens) once
        ``_MAX_HELD_FDS`` are held. Returns whether the descriptor was handed over."""
        if len(batch.cold) < _MAX_HELD_FDS:
            batch.cold.append((i, fd, got))
            return True
        batch.cold.append((i, -1, None))
        return False


class _WarmBatch:
    """One read's pass 1, shared by the threads running it: the batch, its cold pipe, the
    next unclaimed position (handed out under a lock, a few pages at a time), and the
    probe switch (``probe``: try ``RWF_NOWAIT``; off after the first cold page,
    ``cold_seen``)."""

    __slots__ = ("buffers", "cold", "cold_seen", "keys", "out", "probe", "_lock", "_next", "_n")

    #: Pages claimed at a time: the lock is taken once per this many pages.
    STEP = 4

    def __init__(
        self,
        keys: Sequence[str],
        buffers: Sequence[Segments],
        out: list[bool],
        cold: _ColdPipe,
        probe: bool,
    ) -> None:
        self.keys, self.buffers, self.out, self.cold = keys, buffers, out, cold
        self.probe, self.cold_seen = probe, False
        self._lock = threading.Lock()
        self._next, self._n = 0, len(keys)

    def claim(self) -> tuple[int, int] | None:
        """The next ``(lo, hi)`` span of pages for the calling thread; ``None`` when none
        is left."""
        with self._lock:
            lo = self._next
            if lo >= self._n:
                return None
            self._next = hi = min(lo + self.STEP, self._n)
        return lo, hi

    def stop(self) -> None:
        """Hand out nothing more (the caller's share is done; a helper still running ends
        after its current span)."""
        with self._lock:
            self._next = self._n


class _ColdPipe:
    """Pass 2 of a read, fed while pass 1 still runs: the first page pass 1 hands over
    starts up to ``workers`` pool threads, so device reads overlap pass 1's ``open`` calls.
    :meth:`finish` (after pass 1) lets the calling thread work too, then waits for the
    workers; any descriptor still queued after an unexpected error is closed. ``len()``
    is the number of pages handed over and not yet taken (descriptors held for them).

    No deadlock with other reads sharing the pool: a worker only waits for the end of its
    own read's pass 1, which the calling thread finishes alone if need be (a pass-1 helper
    that has not started by then is cancelled, never waited for)."""

    def __init__(
        self,
        run: Callable[[tuple[int, int, int | None]], None],
        pool: ThreadPoolExecutor | None,
        workers: int,
    ) -> None:
        self._run = run
        self._pool = pool
        self._workers = max(0, workers) if pool is not None else 0
        self._q: queue.SimpleQueue[tuple[int, int, int | None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._futures: list[Future[None]] = []
        self._pending = 0
        self._error: BaseException | None = None

    def __len__(self) -> int:
        return self._pending

    def append(self, item: tuple[int, int, int | None]) -> None:
        with self._lock:
            self._pending += 1
            if not self._futures and self._workers and self._pool is not None:
                self._futures = [self._pool.submit(self._work) for _ in range(self._workers)]
        self._q.put(item)

    def _work(self) -> None:
        while (item := self._q.get()) is not None:
            with self._lock:
                self._pending -= 1
            try:
                self._run(item)
            except BaseException as e:  # keep draining; re-raised by finish()
                if item[1] >= 0:
                    try:
                        os.close(item[1])
                    except OSError:
                        pass
                with self._lock:
                    self._error = self._error or e

    def finish(self) -> None:
        with self._lock:
            futures = list(self._futures)
        for _ in range(len(futures) + 1):
            self._q.put(None)
        self._work()
        for f in futures:
            f.result()
        if self._error is not None:
            raise self._error
