"""The compiled accelerator (:mod:`._bulkread`) of the one read path (:mod:`.mget`) and the
one write path (:mod:`.writes`).

Each function here is a drop-in for the Python engine of its path: same arguments, same
state in and out, same results (:data:`.frames.HIT`, ``ABSENT``, ``MISMATCH`` per value),
and it stops at the same place, an error reply, which it reads and returns for the path
to handle. Only the inner loop differs: one C call sends a part's commands (with the read
path's refill policy, or the write window) and receives every reply straight into the
values' segments, with the GIL released once for the run instead of around every send and
reply. On a batch split over connections the parts' threads then no longer hand the GIL to
each other per value (Python per value made writes cost the client about twice the CPU of a
native client; on a machine short of cores that is time taken from the server).

The wire behaviour is the Python reader's: a reply header through a receive of at most
``HEADER_RECV`` bytes before a large value, the rest of the value and its CRLF as one
blocking ``MSG_WAITALL`` ``recvmsg`` over every segment.

It runs on plain (blocking) sockets only, and under a cancel token only where the
connection's interrupter can end a blocked call (:meth:`.resp.Connection.may_block`): the
call runs inside one ``cancel.guard()``, which ``cancel()`` waits for after the interrupter
has shut the socket down (the blocked receive then returns at once). TLS sockets use the
Python engine. What the connection had buffered is handed to the call, and what the call
received past the last reply it parsed is put back (:meth:`.resp.Connection.put_back`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NoReturn

from hicache_sdk.kit.segments import Segments

from .frames import ABSENT, HIT, MISMATCH, CancelGuard, ProtocolError, ReplyError
from .resp import Connection

try:
    from . import _bulkread
except ImportError:  # pragma: no cover - depends on the build
    _bulkread = None  # type: ignore[assignment]

__all__ = ["NATIVE", "stream", "usable", "write"]

#: Whether the compiled engine is used (built; set it to False to use the Python engine).
NATIVE = _bulkread is not None
if _bulkread is not None:  # the result codes are shared with the Python engine
    assert (_bulkread.HIT, _bulkread.ABSENT, _bulkread.MISMATCH) == (HIT, ABSENT, MISMATCH)


def usable(c: Connection, cancel: CancelGuard | None) -> bool:
    """Whether the compiled engine may run on ``c`` (see the module docs)."""
    return NATIVE and c.may_block(cancel)


def _call(c: Connection, cancel: CancelGuard | None, fn: Any, *args: Any) -> tuple[Any, ...]:
    """``fn(fd, buffered, *args)`` (under ``cancel``'s guard); what it received past the last
    reply it parsed is put back into ``c``."""
    try:
        if cancel is None:
            got: tuple[Any, ...] = fn(c.sock.fileno(), c.buffered(), *args)
        else:
            with cancel.guard():
                got = fn(c.sock.fileno(), c.buffered(), *args)
    except BaseException:  # Cancelled before the call, or a signal handler raised
        c.broken = True
        raise
    c.put_back(got[-1])
    return got


def stream(
    c: Connection,
    keys: Sequence[bytes],
    counts: Sequence[int],
    values: Sequence[Segments],
    results: bytearray,
    state: tuple[int, int, int],
    policy: tuple[int, int, int],
    cancel: CancelGuard | None,
) -> tuple[tuple[int, int, int], ReplyError | None]:
    """:func:`.mget.stream_python` on the compiled engine."""
    assert _bulkread is not None
    code, detail, reply, sent, ahead, _ = _call(
        c, cancel, _bulkread.stream, keys, counts, values, results, *state, *policy
    )
    if code == _bulkread.DONE:
        return (reply, sent, ahead), None
    if code == _bulkread.STOP:
        return (reply + 1, sent, ahead), _refusal(c, "redis: MGET reply of the wrong shape", small=True)
    _raise(c, code, detail)


def write(
    c: Connection,
    heads: Sequence[bytes],
    tail: bytes,
    values: Sequence[Segments],
    results: bytearray,
    state: tuple[int, int],
    window: int,
    cancel: CancelGuard | None,
) -> tuple[tuple[int, int], ReplyError | None]:
    """:func:`.writes.write_python` for one connection on the compiled engine."""
    assert _bulkread is not None
    code, detail, reply, sent, _ = _call(
        c, cancel, _bulkread.write, heads, tail, values, results, *state, window
    )
    if code == _bulkread.DONE:
        return (reply, sent), None
    if code == _bulkread.STOP:
        return (reply + 1, sent), _refusal(c, "redis: unexpected reply to a write", small=False)
    _raise(c, code, detail)


def _refusal(c: Connection, wrong: str, small: bool) -> ReplyError:
    """Read the reply the compiled engine stopped at: an error reply is returned; anything
    else is a :class:`ProtocolError` (the connection breaks)."""
    try:
        c.header(small=small)
    except ReplyError as e:
        return e
    c.broken = True
    raise ProtocolError(wrong)


def _raise(c: Connection, code: int, detail: int | str | None) -> NoReturn:
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
