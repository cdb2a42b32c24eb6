"""The write path of :class:`~.file_transport.FileTransport` (the :class:`WritePath` mixin).

A present page is left alone (``True``; with a byte limit its recency is refreshed). A new
one is written with ``pwritev`` to a temporary file in its own directory (missing
directories are created with ``dir_mode``), optionally fsynced, and published with
:func:`.fsops.publish_noreplace`, which never replaces a page a concurrent writer
published first (that counts as ``True``, unless what holds the name is not a page:
``False``, ``not_regular``). With a byte limit the batch's bytes are reserved in the
:class:`~.capacity.CapacityLedger` first (all at once, else page by page as far as room
can be made; a refused page counts ``capacity``), and bytes reserved for pages not
published are released. New pages are spread over ``io_threads``. Failures
never raise and leave no partial or temporary file behind.

Every directory is resolved beneath the root with no symlink followed
(:mod:`.beneath`): a symlink planted as a directory is refused, never written through.
A name given twice in one batch is written once, from its first occurrence; every
occurrence gets that write's result (the first write wins, as the contract says).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from hicache_sdk.transport import Segments

from .base import FileBase, reason_of
from .fsops import publish_noreplace, temp_name
from .vio import pwritev_all, segment_views, total_bytes

__all__ = ["WritePath"]

_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class WritePath(FileBase):
    """The write half of :class:`~.file_transport.FileTransport`: ``write``."""

    _chmod_files: bool  # the umask would strip bits of file_mode: fchmod each file
    _chmod_dirs: bool  # the same for dir_mode and new directories

    def _parent_dir(self, rel_dir: str) -> int:
        """A descriptor of directory ``rel_dir`` (``""``: the root's own descriptor, not to
        be closed), resolved beneath the root with no symlink followed
        (:class:`~.beneath.Beneath`); missing directories are created one component at a
        time (mode ``dir_mode``). Readable, so it can be fsynced."""
        if not rel_dir:
            return self._root_fd
        try:
            return self._fs.open_dir(rel_dir, readable=True)
        except FileNotFoundError:
            pass
        cur = self._root_fd
        try:
            for comp in rel_dir.split("/"):
                created = True
                try:
                    os.mkdir(comp, self.config.dir_mode, dir_fd=cur)
                except FileExistsError:
                    created = False
                nxt = os.open(comp, _DIR_FLAGS, dir_fd=cur)  # O_NOFOLLOW: a symlink is refused
                if created and self._chmod_dirs:
                    os.fchmod(nxt, self.config.dir_mode)
                if cur != self._root_fd:
                    os.close(cur)
                cur = nxt
        except BaseException:
            if cur != self._root_fd:
                os.close(cur)
            raise
        return cur

    def _write_one(self, name: str, segs: Segments) -> tuple[bool, bool]:
        """``(ok, published)``: ``published`` is False when the page already existed.

        Everything happens relative to a descriptor of the page's directory, opened
        beneath the root: the temporary file, the publication, the directory fsync."""
        rel_dir, _, base = name.rpartition("/")
        tmp: str | None = None
        dfd = -1
        try:
            dfd = self._parent_dir(rel_dir)
            tmp = temp_name()
            fd = os.open(tmp, _TMP_FLAGS, self.config.file_mode, dir_fd=dfd)
            try:
                if self._chmod_files:
                    os.fchmod(fd, self.config.file_mode)
                pwritev_all(fd, segment_views(segs))
                if self.config.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            published = publish_noreplace(tmp, base, dfd)
            if published:
                tmp = None
                if self.config.fsync:
                    os.fsync(dfd)
                return True, True
            if self._stat_size(name) is None:  # something that is not a page holds the name
                self._count("not_regular")
                return False, False
            return True, False
        except OSError as e:
            self._count(reason_of(e))
            return False, False
        finally:
            if tmp is not None and dfd >= 0:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except OSError:
                    pass
            if dfd >= 0 and dfd != self._root_fd:
                os.close(dfd)

    def _touch(self, name: str) -> None:
        """Refresh the recency of ``name`` (best effort: a read-only root keeps it)."""
        try:
            pfd, base = self._fs.parent(name)
            try:
                os.utime(base, dir_fd=pfd, follow_symlinks=False)
            finally:
                self._fs.release(pfd)
        except OSError:
            pass

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        """Create each object unless present (present: ``True``, untouched; with a byte
        limit, its recency is refreshed). ``False`` on I/O failure or when the byte limit
        cannot make room; no partial or temporary file is left behind."""
        n = self._check_batch(keys, buffers)
        if self._closed:
            return [False] * n
        out = [False] * n
        todo: list[int] = []
        first: dict[str, int] = {}
        dups: list[tuple[int, int]] = []  # (later occurrence, first occurrence)
        for i, k in enumerate(keys):
            j = first.setdefault(k, i)
            if j != i:
                dups.append((i, j))
            elif self._stat_size(k) is not None:
                out[i] = True
                if self.ledger is not None:
                    self._touch(k)
            else:
                todo.append(i)
        if todo:
            self._write_new(keys, buffers, todo, out)
        for i, j in dups:
            out[i] = out[j]
        return out

    def _write_new(
        self, keys: Sequence[str], buffers: Sequence[Segments], todo: list[int], out: list[bool]
    ) -> None:
        """Write the absent pages ``todo`` (distinct names) into ``out``."""
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
                self._count(reason_of(e))

    def _reserve(self, nbytes: int) -> bool:
        if self.ledger is None:
            return True
        try:
            ok = self.ledger.reserve(nbytes)
        except OSError as e:
            self._count(reason_of(e))
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
