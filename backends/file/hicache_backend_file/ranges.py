"""Native ranged reads of :class:`~.file_transport.FileTransport`: one ``open``, one
``fstat`` and one ``preadv`` at each range's offset (the :class:`RangePath` mixin), for
one object or, in one call, for many (:class:`~hicache_sdk.transport.RangedReads`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from hicache_sdk.transport import Range, RangedReads, Segments, check_ranges, ranges_within

from .base import FileBase, reason_of
from .names import check_names
from .vio import IOV_MAX, advance, preadv_exact, segment_arrays, segment_views

__all__ = ["RangePath"]

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class RangePath(FileBase, RangedReads):
    """``read_ranges`` for the file transport: a local file reads a range per ``preadv``,
    so ranges are cheap; ``read_ranges_batch`` reads many objects' ranges in one call."""

    cheap_ranges = True

    def read_ranges_batch(self, keys: Sequence[str], ranges: Sequence[Sequence[Range]]) -> list[bool]:
        """``[read_ranges(keys[i], ranges[i]) ...]``, the names and ranges checked once for
        the batch. ``ValueError`` for a bad name or range, before any I/O."""
        if len(keys) != len(ranges):
            raise ValueError(f"ranges: expected {len(keys)} entries (one per key), got {len(ranges)}")
        check_names(keys)
        checked = [check_ranges(r, f"ranges[{i}]") for i, r in enumerate(ranges)]
        if self._closed:
            return [False] * len(keys)
        read = self._read_checked
        return [read(k, c) for k, c in zip(keys, checked)]

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> bool:
        """See :meth:`hicache_sdk.transport.Transport.read_ranges`. A missing object, a
        non-regular file, a range past the end (``out_of_range``) or a short read is
        ``False`` with its reason counted; a file is never removed here (a range read
        does not know the page's size)."""
        check_names([key])
        checked = check_ranges(ranges)
        if self._closed:
            return False
        return self._read_checked(key, checked)

    def _read_checked(self, key: str, checked: list[tuple[int, int, Segments]]) -> bool:
        """:meth:`read_ranges` of ``key`` once its name and ranges are checked."""
        try:
            fd = self._fs.open(key, _FLAGS)
        except OSError as e:
            self._count(reason_of(e))
            return False
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self._count("not_regular")
                return False
            if not ranges_within(checked, st.st_size):
                self._count("out_of_range")
                return False
            preadv = os.preadv
            for offset, n, segs in checked:
                if not n:
                    continue
                arrays, _ = segment_arrays(segs)
                got = preadv(fd, arrays, offset) if len(arrays) <= IOV_MAX else 0
                # a short read (a signal, the 2 GiB cap, too many segments) resumes by views
                if got != n and not preadv_exact(fd, advance(segment_views(segs), got), offset + got):
                    self._count("size_mismatch")
                    return False
            return True
        except OSError as e:
            self._count(reason_of(e))
            return False
        finally:
            os.close(fd)
