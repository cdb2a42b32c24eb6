"""Native ranged reads of :class:`~.file_transport.FileTransport`: one ``open``, one
``fstat`` and one ``preadv`` at each range's offset (the :class:`RangePath` mixin)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from hicache_sdk.transport import Range, check_ranges, ranges_within

from .base import FileBase, reason_of
from .names import check_names
from .vio import preadv_exact, segment_views

__all__ = ["RangePath"]

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class RangePath(FileBase):
    """``read_ranges`` for the file transport: a local file reads a range per ``preadv``,
    so ranges are cheap."""

    cheap_ranges = True

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> bool:
        """See :meth:`hicache_sdk.transport.Transport.read_ranges`. A missing object, a
        non-regular file, a range past the end (``out_of_range``) or a short read is
        ``False`` with its reason counted; a file is never removed here (a range read
        does not know the page's size)."""
        check_names([key])
        checked = check_ranges(ranges)
        if self._closed:
            return False
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
            for offset, n, segs in checked:
                if n and not preadv_exact(fd, segment_views([s for s in segs if s[1]]), offset):
                    self._count("size_mismatch")
                    return False
            return True
        except OSError as e:
            self._count(reason_of(e))
            return False
        finally:
            os.close(fd)
