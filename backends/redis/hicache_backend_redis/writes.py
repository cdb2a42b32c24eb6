"""Create-if-absent writes on data connections, each value sent from its segments.

A value goes as ``SETNX key value`` when the window is on and there is no TTL (the value
last: nothing follows it, see :class:`~.config.RedisConfig` ``write_window``), else as
``SET key value NX [PX ttl]``. Either is atomic (a reader sees the whole page or nothing)
and leaves an existing key untouched: ``:1`` / ``+OK`` (written) and ``:0`` / ``$-1`` (it
was there) are both success. An error reply (``OOM``, ``NOPERM``, ``READONLY``) fails its
value only and is passed to ``refused``.

:func:`write_part` writes one connection's values: with the compiled loop
(:func:`.native_mget.write`) where it may run, else with :func:`write_lanes`, the Python
writer, which also drives several connections from one thread (a batch too small to split
over threads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hicache_sdk.kit.segments import Segments

from . import native_mget
from .frames import CancelGuard, ProtocolError, ReplyError, set_nx_frame
from .resp import Connection, views_of

__all__ = ["frames", "write_lanes", "write_part"]

#: ``refused(connection, error)``: a value's write was answered with an error reply.
Refused = Callable[[Connection, ReplyError], None]


def frames(
    names: Sequence[bytes], sizes: Sequence[int], ttl_ms: int, window: int
) -> tuple[list[bytes], bytes]:
    """The bytes before each value (``SETNX`` when ``window`` and no TTL, else ``SET ... NX``)
    and the bytes after every value."""
    tail = set_nx_frame(b"", 0, ttl_ms, window > 0)[1]
    return [set_nx_frame(n, s, ttl_ms, window > 0)[0] for n, s in zip(names, sizes)], tail


def write_lanes(
    lanes: Sequence[tuple[Connection, Sequence[int]]],
    heads: Sequence[bytes],
    tail: bytes,
    values: Sequence[Segments],
    window: int,
    out: list[bool],
    cancel: CancelGuard | None,
    *,
    counted: bool,
    refused: Refused,
) -> None:
    """Each lane (a connection and the indices of its values, in order) keeps ``window``
    values in flight (``0``: all of them): its first window in one flush, then the next
    value as each reply arrives; ``out[i]`` becomes True for each value written or already
    there. ``counted``: lane 0's flushes are round trips of the batch."""
    if not lanes:
        return

    def one(i: int) -> list[bytes | memoryview]:
        return [heads[i], *views_of(values[i]), tail]

    ws = [window or len(idx) for _, idx in lanes]
    for j, (c, idx) in enumerate(lanes):
        c.send([x for i in idx[: ws[j]] for x in one(i)], counted=counted and j == 0, cancel=cancel)
    for n in range(max(len(idx) for _, idx in lanes)):  # the n-th reply of each lane
        for j, (c, idx) in enumerate(lanes):
            if n < len(idx):
                try:
                    out[idx[n]] = _written(c)
                except ReplyError as e:
                    refused(c, e)
                if n + ws[j] < len(idx):
                    c.send(one(idx[n + ws[j]]), counted=counted and j == 0, cancel=cancel)


def _written(c: Connection) -> bool:
    """Read one write's reply: True for ``:n``, ``+OK`` or ``$-1``; an error reply raises
    :class:`ReplyError`; anything else is a :class:`ProtocolError` (the connection breaks)."""
    kind, n = c.header()
    if kind in (0x3A, 0x2B) or (kind == 0x24 and n == -1):  # ':' '+' '$'
        return True
    c.broken = True
    raise ProtocolError("redis: unexpected reply to a write")


def write_part(
    c: Connection,
    idx: Sequence[int],
    heads: Sequence[bytes],
    tail: bytes,
    values: Sequence[Segments],
    window: int,
    out: list[bool],
    cancel: CancelGuard | None,
    *,
    counted: bool,
    refused: Refused,
) -> None:
    """Write the values ``idx`` on ``c`` (see :func:`write_lanes`), with the compiled loop
    where it may run (a plain socket; under a cancel token only while ``c`` watches it)."""
    if not native_mget.usable(c, cancel):
        write_lanes([(c, idx)], heads, tail, values, window, out, cancel, counted=counted, refused=refused)
        return
    got = native_mget.write(
        c, [heads[i] for i in idx], tail, [values[i] for i in idx], window or len(idx), cancel,
        counted=counted, refused=lambda _, e: refused(c, e),
    )  # fmt: skip
    for i, ok in zip(idx, got):
        out[i] = ok
