"""Streamed ``MGET`` replies read, and windowed writes sent, by the compiled loop
(:mod:`._bulkread`).

:func:`write` is the same for a part's create-if-absent writes: one call sends every value
from its segments (``write_window`` in flight) and reads every reply, with the GIL released
once for the part instead of around every send and reply (Python per value, and the parts'
threads handing the GIL to each other, made writes cost the client about twice the CPU of a
native client; on a machine short of cores that is time taken from the server).

One call of ``_bulkread.stream`` encodes and sends a part's commands (with :mod:`.mget`'s
refill policy) and receives every reply of the part straight into the values' segments, with the GIL
released once for the whole run instead of twice per value: on a batch split over
connections, the parts' threads no longer hand the GIL to each other around every receive,
and no Python runs per value. The wire behaviour is the Python reader's: a reply header
through a receive of at most ``HEADER_RECV`` bytes before a large value, the rest of the
value and its CRLF as one blocking ``MSG_WAITALL`` ``recvmsg`` over every segment.

It runs on plain (blocking) sockets only, and under a cancel token only where the
connection's interrupter can end a blocked call (:meth:`.resp.Connection.watch`): the call
runs inside one ``cancel.guard()``, which ``cancel()`` waits for after the interrupter has
shut the socket down (the blocked receive then returns at once). TLS sockets use the Python
reader.

What the connection had buffered is handed to the call, and what the call received past
the last reply it parsed is put back: the connection's buffer is the same afterwards as if
the Python reader had run. An error reply in place of an ``MGET`` reply (``NOPERM``,
``MOVED``) stops the call; it is read here and the run resumes with the next reply.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from hicache_sdk.kit.segments import Segments

from .frames import CancelGuard, ProtocolError, ReplyError
from .resp import Connection

try:
    from . import _bulkread
except ImportError:  # pragma: no cover - depends on the build
    _bulkread = None  # type: ignore[assignment]

__all__ = ["NATIVE", "stream", "usable", "write"]

#: Whether the compiled reader is used (built; set it to False to use the Python reader).
NATIVE = _bulkread is not None


def usable(c: Connection, cancel: CancelGuard | None) -> bool:
    """Whether the compiled reader may read replies on ``c`` (see the module docs)."""
    return NATIVE and c.blocking and (cancel is None or (c._interruptible and c.cancel is cancel))


def stream(
    c: Connection,
    names: Sequence[bytes],
    buffers: Sequence[Segments],
    chunks: Sequence[Sequence[int]],
    out: list[Any],
    cancel: CancelGuard | None,
    policy: tuple[int, int, int],
    *,
    counted: bool,
    refused: Callable[[Sequence[int], ReplyError], None] | None,
) -> None:
    """:func:`.mget.stream_mget` on the compiled reader; ``policy``: its ``(AHEAD,
    LOW_WATER, MIN_IN_FLIGHT)``. Raises as the Python reader does (the connection is then
    broken): ``TimeoutError``, an ``OSError`` of the socket, :class:`ProtocolError`, or
    ``Cancelled`` when the token's interrupter ended the call."""
    assert _bulkread is not None
    order = [i for ch in chunks for i in ch]
    keys = [names[i] for i in order]
    values = [buffers[i] for i in order]
    counts = [len(ch) for ch in chunks]
    results = bytearray(len(values))
    if counted and chunks:
        c.round_trips += 1
    fd = c.sock.fileno()
    reply = sent = ahead = 0
    while reply < len(chunks):
        args = (fd, c._view[c._start : c._end], keys, counts, values, results)
        try:
            if cancel is None:
                code, detail, reply, sent, ahead, left = _bulkread.stream(*args, reply, sent, ahead, *policy)
            else:
                with cancel.guard():
                    code, detail, reply, sent, ahead, left = _bulkread.stream(
                        *args, reply, sent, ahead, *policy
                    )
        except BaseException:  # Cancelled before the call, or a signal handler raised
            c.broken = True
            raise
        c._buf[: len(left)] = left
        c._start, c._end = 0, len(left)
        if code == _bulkread.STOP:
            try:
                c.header(small=True)
            except ReplyError as e:
                if refused is not None:
                    refused(chunks[reply], e)
                reply += 1
                continue
            c.broken = True
            raise ProtocolError("redis: MGET reply of the wrong shape")
        if code != _bulkread.DONE:
            _raise(c, code, detail)
    hit = _bulkread.HIT
    for i, r in zip(order, results):
        if r:  # 0: the reply was refused (``refused`` has set ``out``)
            out[i] = r == hit


def write(
    c: Connection,
    heads: Sequence[bytes],
    tail: bytes,
    values: Sequence[Segments],
    window: int,
    cancel: CancelGuard | None,
    *,
    counted: bool,
    refused: Callable[[int, ReplyError], None],
) -> list[bool]:
    """Send ``heads[i]``, the segments of ``values[i]`` and ``tail`` for each value, at most
    ``window`` in flight, and read their replies: per value True when written or already
    there (``NX``). An error reply in place of one is read here, passed to ``refused``
    (value index, error) and the run resumes. ``counted``: the round trips are those of the
    Python writer (the first flush, then one per value sent after a reply). Raises as the
    Python writer does (the connection is then broken)."""
    assert _bulkread is not None
    n = len(values)
    results = bytearray(n)
    if counted and n:
        c.round_trips += 1 + max(0, n - window)
    fd = c.sock.fileno()
    reply = sent = 0
    while reply < n:
        args = (fd, c._view[c._start : c._end], heads, tail, values, results, reply, sent, window)
        try:
            if cancel is None:
                code, detail, reply, sent, left = _bulkread.write(*args)
            else:
                with cancel.guard():
                    code, detail, reply, sent, left = _bulkread.write(*args)
        except BaseException:  # Cancelled before the call, or a signal handler raised
            c.broken = True
            raise
        c._buf[: len(left)] = left
        c._start, c._end = 0, len(left)
        if code == _bulkread.STOP:
            try:
                c.header()
            except ReplyError as e:
                refused(reply, e)
                reply += 1
                continue
            c.broken = True
            raise ProtocolError("redis: unexpected reply to a write")
        if code != _bulkread.DONE:
            _raise(c, code, detail)
    hit = _bulkread.HIT
    return [r == hit for r in results]


def _raise(c: Connection, code: int, detail: int | str | None) -> None:
    assert _bulkread is not None
    if code == _bulkread.EOF:
        c.lost(None)
    if code == _bulkread.OSERROR:
        assert isinstance(detail, int)
        c.lost(OSError(detail, os.strerror(detail)))
    c.broken = True
    if code == _bulkread.TIMEOUT:
        raise TimeoutError("redis: no reply within socket_timeout_s")
    raise ProtocolError(str(detail))
