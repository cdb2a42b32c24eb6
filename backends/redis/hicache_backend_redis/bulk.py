"""Bulk replies received straight into page memory (:func:`read_bulk_into`), the Python reader.

What is already buffered is copied first; on a plain socket the rest of the value and its
CRLF are then one blocking ``MSG_WAITALL`` ``recvmsg_into`` over every segment at once (one
system call per value, so the threads of a batch's parts hand the GIL over far less often);
over TLS, or when no interrupter can end a blocking call, receives are no-wait calls after
``poll``. Under a cancel token every touch of page memory runs inside its guard.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Sequence

from hicache_sdk.kit.segments import memoryviews as views_of

from .frames import CRLF, DIRECT_MIN, HEADER_RECV, RECV, CancelGuard, ProtocolError
from .resp import Connection

__all__ = ["read_bulk_into"]


def read_bulk_into(
    c: Connection, segments: Sequence[tuple[int, int]], cancel: CancelGuard | None = None
) -> bool | None:
    """Read one bulk reply into ``segments``.

    ``None`` for a null bulk (absent), ``True`` when its size equals the segments'
    total and every byte landed, ``False`` for a size mismatch (the value is drained)."""
    want = sum(s for _, s in segments)
    small = want >= DIRECT_MIN
    kind, n = c.header(small)
    if kind != 0x24:
        c.broken = True
        raise ProtocolError("redis: expected a bulk reply")
    if n < 0:
        return None
    deadline = time.monotonic() + c.timeout_s
    if n != want:
        c.drain(n + 2, deadline)
        return False
    try:
        views = c.buffered_into(views_of(segments), cancel)
        if views and c.blocking and (cancel is None or c.interruptible):
            tail = _scatter_into(c, views, deadline, cancel)
        else:
            _into(c, views, deadline, cancel)
            tail = c.take(2, deadline, HEADER_RECV if small else RECV)
    except BaseException:  # Cancelled, a reset, a timeout: the reply is cut short
        c.broken = True
        raise
    if tail != CRLF:
        c.broken = True
        raise ProtocolError("redis: bulk reply not terminated by CRLF")
    return True


def _scatter_into(
    c: Connection, views: list[memoryview], deadline: float, cancel: CancelGuard | None
) -> bytes:
    """Receive the rest of a value and its CRLF with blocking ``MSG_WAITALL``
    ``recvmsg_into`` calls over every segment at once (one system call per value, not
    one per segment plus one for the CRLF); returns the CRLF bytes."""
    crlf = bytearray(2)
    iov = [*views, memoryview(crlf)]
    while iov:
        try:
            if cancel is None:
                k = c.sock.recvmsg_into(iov, 0, socket.MSG_WAITALL)[0]
            else:
                with cancel.guard():
                    k = c.sock.recvmsg_into(iov, 0, socket.MSG_WAITALL)[0]
        except BlockingIOError:  # SO_RCVTIMEO passed with nothing received
            c.wait(select.POLLIN, deadline)
            continue
        except OSError as e:
            c.lost(e)
        if k == 0:
            c.lost(None)
        while k:
            if k >= len(iov[0]):
                k -= len(iov.pop(0))
            else:
                iov[0] = iov[0][k:]
                k = 0
    return bytes(crlf)


def _into(c: Connection, views: list[memoryview], deadline: float, cancel: CancelGuard | None) -> None:
    """Receive the rest of a value straight into ``views`` (the private buffer is empty:
    :meth:`.resp.Connection.buffered_into` ran first), one receive at a time (TLS, or no interrupter)."""
    for view in views:
        pos = 0
        size = len(view)
        while pos < size:
            if cancel is None:
                k = c.recv_into(view[pos:], deadline, whole=True)
            else:
                # The receive under the guard cannot block (or its interrupter ends it);
                # when nothing is ready, wait outside it (cancel() must never wait on a
                # poll) and try again.
                with cancel.guard():
                    k = c.recv_once(view[pos:])
                if k == 0 and not (c.tls and c.sock.pending()):  # type: ignore[attr-defined]
                    c.wait(select.POLLIN, deadline)
            pos += k
