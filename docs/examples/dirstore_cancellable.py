"""The ``dirstore`` example made cancellable: zero-copy transfers that still honour a deadline.

This file is the example of the "Cancellable transports" section of
``docs/writing-a-backend.md``; ``tests/docs/test_docs_examples.py`` certifies it with the
conformance suite under a ``transfer_timeout_s`` (so every transfer takes the cancellable
path) and checks that no staging memory was used.

A file read or write can block inside the kernel, so the plain ``DirTransport`` must not
declare ``cancellable``. This one touches caller memory only in calls that cannot block:

* ``read``: ``os.preadv(..., RWF_NOWAIT)`` straight into the caller's buffers when the
  file is in the page cache (it never waits for the disk: ``EAGAIN`` otherwise); a cold file
  is read into a private buffer first (that may block, but touches no caller memory), and
  copied into the caller's buffers by ``memmove``;
* ``write``: the caller's bytes are copied into a private buffer by ``memmove``, and the
  private buffer is written to disk (that may block, with no caller memory involved).

Each touch of caller memory runs inside ``with cancel.guard():``. Once the deadline
cancels the token, ``cancel()`` returns only after any running guard ended, and every later
guard raises ``Cancelled``: no byte of caller memory is touched after the deadline.
"""

from __future__ import annotations

import ctypes
import errno
import os
import tempfile
from collections.abc import Sequence
from typing import ClassVar

from dirstore_backend import _TMP, DirConfig, DirTransport, _reason

from hicache_sdk import CancelToken, PagedStorage, Segments
from hicache_sdk.kit import first_occurrences, memoryviews, total_bytes

__all__ = ["CancellableDirStorage", "CancellableDirTransport"]

_NOWAIT = getattr(os, "RWF_NOWAIT", 0)


class CancellableDirTransport(DirTransport):
    """``DirTransport`` whose transfers may run on caller memory under a deadline."""

    cancellable: ClassVar[bool] = True

    def read(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelToken | None = None
    ) -> list[bool]:
        token = cancel if cancel is not None else CancelToken()
        return [self._read_into(key, segs, token) for key, segs in zip(keys, buffers)]

    def _read_into(self, key: str, segs: Segments, cancel: CancelToken) -> bool:
        size = total_bytes(segs)
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError as e:
            self.count_failure(_reason(e))
            return False
        try:
            if os.fstat(fd).st_size != size:
                return False  # cut short or foreign: never a hit
            if _NOWAIT:
                try:
                    with cancel.guard():  # page-cache hit: straight into caller memory
                        return os.preadv(fd, memoryviews(segs), 0, _NOWAIT) == size
                except BlockingIOError:
                    pass  # not cached: read it privately first
            private = bytearray(size)
            if os.preadv(fd, [memoryview(private)], 0) != size:  # may block: no caller memory
                return False
            src = (ctypes.c_char * size).from_buffer(private)
            offset = 0
            with cancel.guard():
                for address, nbytes in segs:
                    ctypes.memmove(address, ctypes.addressof(src) + offset, nbytes)
                    offset += nbytes
            return True
        except OSError as e:
            if e.errno != errno.EAGAIN:
                self.count_failure(_reason(e))
            return False
        finally:
            os.close(fd)

    def write(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelToken | None = None
    ) -> list[bool]:
        token = cancel if cancel is not None else CancelToken()
        dup = first_occurrences(keys)  # a repeated key is written once, from its first copy
        if dup is None:
            return [self._write_from(k, b, token) for k, b in zip(keys, buffers)]
        keep, owner = dup
        done = [self._write_from(keys[i], buffers[i], token) for i in keep]
        return [done[j] for j in owner]

    def _write_from(self, key: str, segs: Segments, cancel: CancelToken) -> bool:
        path = self._path(key)
        if os.path.exists(path):
            return True  # create-if-absent: an existing object is left untouched
        private = bytearray(total_bytes(segs))
        dst = (ctypes.c_char * len(private)).from_buffer(private)
        offset = 0
        with cancel.guard():  # the only touch of caller memory: a copy that cannot block
            for address, nbytes in segs:
                ctypes.memmove(ctypes.addressof(dst) + offset, address, nbytes)
                offset += nbytes
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=_TMP, dir=self.root)
            with os.fdopen(fd, "wb", buffering=0) as f:
                f.write(private)
            try:
                os.link(tmp, path)  # atomic publication; fails if another writer won
            except FileExistsError:
                pass
            return True
        except OSError as e:
            self.count_failure(_reason(e))
            return False
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


class CancellableDirStorage(PagedStorage):
    """The cancellable ``dirstore`` backend."""

    config_cls = DirConfig
    transport_cls = CancellableDirTransport
    backend_name = "dirstore-cancellable"
