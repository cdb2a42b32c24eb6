"""RESP request frames and the types shared by the connection and the transports.

:func:`command` encodes a command of small arguments; :func:`set_nx_frame` gives the bytes
around a page value in a create-if-absent write, so the value itself is sent from the
caller's memory without a copy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = [
    "ABSENT",
    "CRLF",
    "HIT",
    "MISMATCH",
    "CancelGuard",
    "ProtocolError",
    "ReplyError",
    "command",
    "set_nx_frame",
    "set_nx_suffix",
    "write_frames",
]

#: A RESP line ending.
CRLF = b"\r\n"
#: The private receive buffer's size (reply headers and small values).
RECV = 1 << 16
#: Values at least this large are received straight into their segments, their header
#: through a receive of at most ``HEADER_RECV`` bytes.
DIRECT_MIN = 16 << 10
HEADER_RECV = 64
#: What became of one value of a read or write (a byte per value, the compiled reader's
#: codes too; 0: refused with an error reply): received whole / written or already there,
#: a null bulk (absent), a bulk of another size (drained).
HIT, ABSENT, MISMATCH = 1, 2, 3


class ReplyError(Exception):
    """The server answered with an error reply (``-ERR ...``, ``-NOPERM ...``)."""


class ProtocolError(OSError):
    """The byte stream is not what RESP says it must be."""


class CancelGuard(Protocol):
    @property
    def cancelled(self) -> bool: ...

    def guard(self) -> contextlib.AbstractContextManager[Any]: ...

    def on_cancel(self, interrupt: Callable[[], None]) -> Callable[[], bool]: ...


def command(*args: bytes | str | int) -> bytes:
    """Encode a command whose arguments are small (keys, options)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def set_nx_suffix(ttl_ms: int) -> tuple[bytes, int]:
    """The encoded arguments after a ``SET key value`` value (``NX``, and ``PX ttl_ms`` when
    ``ttl_ms`` is set), and the command's argument count: ``SET key value NX [PX ms]``."""
    tail = b"\r\n$2\r\nNX\r\n"
    if not ttl_ms:
        return tail, 4
    ms = str(ttl_ms).encode()
    return tail + b"$2\r\nPX\r\n$%d\r\n%s\r\n" % (len(ms), ms), 6


def set_nx_frame(name: bytes, nbytes: int, ttl_ms: int, value_last: bool) -> tuple[bytes, bytes]:
    """The bytes before and after an ``nbytes`` value in a create-if-absent write of
    ``name``: ``SETNX name value`` when ``value_last`` and there is no TTL (nothing follows
    the value), else ``SET name value NX [PX ttl_ms]``."""
    if value_last and not ttl_ms:
        return b"*3\r\n$5\r\nSETNX\r\n$%d\r\n%s\r\n$%d\r\n" % (len(name), name, nbytes), CRLF
    tail, nargs = set_nx_suffix(ttl_ms)
    return b"*%d\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (nargs, len(name), name, nbytes), tail


def write_frames(
    names: Sequence[bytes], sizes: Sequence[int], ttl_ms: int, window: int
) -> tuple[list[bytes], bytes]:
    """The bytes before each value (``SETNX`` when ``window`` and no TTL, else ``SET ... NX``)
    and the bytes after every value: the frames of every create-if-absent write."""
    tail = set_nx_frame(b"", 0, ttl_ms, window > 0)[1]
    return [set_nx_frame(n, s, ttl_ms, window > 0)[0] for n, s in zip(names, sizes)], tail
