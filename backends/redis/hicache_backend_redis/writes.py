"""The write path: create-if-absent writes on data connections, each value sent from its segments.

A value goes as ``SETNX key value`` when the window is on and there is no TTL (the value
last: nothing follows it, see :class:`~.config.RedisConfig` ``write_window``), else as
``SET key value NX [PX ttl]`` (:func:`.frames.write_frames`). Either is atomic (a reader
sees the whole page or nothing) and leaves an existing key untouched: ``:1`` / ``+OK``
(written) and ``:0`` / ``$-1`` (it was there) are both success. An error reply (``OOM``,
``NOPERM``, ``READONLY``, ``MOVED``) fails its value only and is passed to ``refused``.

:func:`write_lanes` is the one entry: one or more connections (lanes), each with the
indices of its values. One lane runs on the compiled engine (:func:`.native.write`) where
it may; otherwise :func:`write_python` drives every lane from this thread (a batch too small
to split over threads still goes over several connections). Both engines take and return
the same state and stop at an error reply, handled here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hicache_sdk.kit.segments import Segments

from . import native
from .frames import HIT, CancelGuard, ProtocolError, ReplyError
from .resp import Connection, views_of

__all__ = ["Refused", "write_lanes", "write_python"]

#: ``refused(connection, error)``: a value's write was answered with an error reply; what
#: it returns becomes the value's result.
Refused = Callable[[Connection, ReplyError], Any]
#: One connection and the indices of its values, in the order they are sent.
Lane = tuple[Connection, Sequence[int]]


def write_lanes(
    lanes: Sequence[Lane],
    heads: Sequence[bytes],
    tail: bytes,
    values: Sequence[Segments],
    window: int,
    out: list[Any],
    cancel: CancelGuard | None,
    *,
    refused: Refused,
) -> None:
    """Each lane keeps ``window`` values in flight (``0``: all of them): its first window in
    one flush, then the next value as each reply arrives; ``out[i]`` becomes True for each
    value written or already there, ``refused(...)`` for one answered with an error reply."""
    lanes = [(c, idx) for c, idx in lanes if len(idx)]
    if not lanes:
        return
    if len(lanes) == 1 and native.usable(lanes[0][0], cancel):
        c, idx = lanes[0]
        sub_heads, sub_values = [heads[i] for i in idx], [values[i] for i in idx]
        results = bytearray(len(idx))
        state = (0, 0)
        while state[0] < len(idx):
            state, refusal = native.write(
                c, sub_heads, tail, sub_values, results, state, window or len(idx), cancel
            )
            if refusal is not None:
                out[idx[state[0] - 1]] = refused(c, refusal)
        for i, r in zip(idx, results):
            if r:
                out[i] = r == HIT
        return
    states = [(0, 0)] * len(lanes)
    everything = bytearray(len(values))
    while True:
        stopped = write_python(lanes, heads, tail, values, everything, states, window, cancel)
        if stopped is None:
            break
        j, refusal = stopped
        c, idx = lanes[j]
        out[idx[states[j][0] - 1]] = refused(c, refusal)
    for _, idx in lanes:
        for i in idx:
            if everything[i]:
                out[i] = everything[i] == HIT


def write_python(
    lanes: Sequence[Lane],
    heads: Sequence[bytes],
    tail: bytes,
    values: Sequence[Segments],
    results: bytearray,
    states: list[tuple[int, int]],
    window: int,
    cancel: CancelGuard | None,
) -> tuple[int, ReplyError] | None:
    """The Python engine of :func:`write_lanes`: ``results[i]`` becomes :data:`.frames.HIT`
    for each value written or already there. ``states[j]``: ``(reply, sent)`` of lane ``j``,
    replies read and values sent, updated in place. Returns ``None`` once every reply is
    read, or ``(j, error)`` just after lane ``j`` read an error reply (its state then points
    past that value)."""

    def one(i: int) -> list[bytes | memoryview]:
        return [heads[i], *views_of(values[i]), tail]

    ws = [window or len(idx) for _, idx in lanes]
    for j, (c, idx) in enumerate(lanes):
        reply, sent = states[j]
        if sent == 0:
            first = idx[: ws[j]]
            c.send([x for i in first for x in one(i)], cancel=cancel)
            states[j] = (reply, len(first))
    while True:
        busy = False
        for j, (c, idx) in enumerate(lanes):  # the next reply of each lane, in turn
            reply, sent = states[j]
            if reply == len(idx):
                continue
            busy = True
            refusal: ReplyError | None = None
            try:
                if _written(c):
                    results[idx[reply]] = HIT
            except ReplyError as e:
                refusal = e
            reply += 1
            if sent < len(idx):
                c.send(one(idx[sent]), cancel=cancel)
                sent += 1
            states[j] = (reply, sent)
            if refusal is not None:
                return j, refusal
        if not busy:
            return None


def _written(c: Connection) -> bool:
    """Read one write's reply: True for ``:n``, ``+OK`` or ``$-1``; an error reply raises
    :class:`ReplyError`; anything else is a :class:`ProtocolError` (the connection breaks)."""
    kind, n = c.header()
    if kind in (0x3A, 0x2B) or (kind == 0x24 and n == -1):  # ':' '+' '$'
        return True
    c.broken = True
    raise ProtocolError("redis: unexpected reply to a write")
