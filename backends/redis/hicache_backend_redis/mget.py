"""The read path: streamed ``MGET`` reads, bounded commands, a small window of them in flight.

:func:`stream_mget` is the one way a page is read, on a standalone server, a sentinel's
master and every master of a cluster. Its inner loop runs on the compiled engine
(:func:`.native.stream`) where it may, else on :func:`stream_python`; both follow the policy
below, take and return the same state and stop at an error reply, which
:func:`stream_mget` handles.

A batch's keys are cut into ``MGET`` commands of at most ``min(max_command_bytes,
STREAM_CHUNK)`` expected value bytes (a value larger than that gets a command of its own;
keys that must not share a command, such as a cluster's different slots, are kept apart).
The first commands (at least two, and at least ``AHEAD`` bytes of values) are sent in one
flush, one round trip; whenever fewer than ``LOW_WATER`` bytes are still requested, more are
sent (up to ``AHEAD``) as a reply starts, so the server always has the next command queued
but holds only about ``AHEAD`` bytes of replies per connection (512 KiB). A refill wakes the
server, which on a busy machine costs a context switch: refills come a few commands at a
time, not one per reply. That is the policy of a connection that carries a whole read
(:data:`PIPELINED`); a connection that carries one of several parts of a read keeps one
command in flight instead (:data:`ONE_AT_A_TIME`, which says why).

Why: one ``MGET`` for a whole batch makes single-threaded Redis build the batch's entire
reply in fresh memory before sending a byte (page faults, zeroing, freeing: measured here at
three times the server CPU per byte of streamed reads), and stalls every other client
meanwhile; with small replies in flight its allocator reuses the same few buffers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from itertools import accumulate, pairwise
from typing import Any

from hicache_sdk.kit.segments import Segments

from . import native
from .bulk import read_bulk_into
from .frames import ABSENT, HIT, MISMATCH, CancelGuard, ProtocolError, ReplyError, command
from .resp import Connection

__all__ = [
    "AHEAD",
    "LOW_WATER",
    "ONE_AT_A_TIME",
    "PIPELINED",
    "STREAM_CHUNK",
    "chunk_keys",
    "stream_mget",
    "stream_python",
]

log = logging.getLogger(__name__)

#: Value bytes per streamed ``MGET`` (bounded by ``max_command_bytes`` too).
STREAM_CHUNK = 256 << 10
#: Value bytes requested ahead of the reply being read (at least two commands) ...
AHEAD = 512 << 10
#: ... topped up when fewer than this many are still requested.
LOW_WATER = 256 << 10
#: Commands in flight at least (the one being read included).
MIN_IN_FLIGHT = 2
#: The refill policy ``(AHEAD, LOW_WATER, MIN_IN_FLIGHT)`` of a read that is a batch's only
#: connection: the server always has the next command queued.
PIPELINED = (AHEAD, LOW_WATER, MIN_IN_FLIGHT)
#: The policy of a read that is one of several parts of a batch: one command in flight, the
#: next sent once the reply before it is read whole. The server always has another part's
#: command to serve, and a reply never queues behind an unread one, so Redis writes it in
#: one ``writev``. With a reply queued behind an unread one the socket is full, the write is
#: partial and Redis installs and removes a write handler for every value (two
#: ``epoll_ctl`` calls): about a tenth more server CPU per byte here, and on a loopback
#: batch Redis's one core is the bottleneck (128 x 256 KiB over 4 connections: 7.2 ms against
#: 8.3 ms pipelined, ``strace -c`` of the server: 2560 ``epoll_ctl`` per 20 calls against none).
ONE_AT_A_TIME = (1, 0, 1)


def chunk_keys(
    groups: Sequence[Sequence[int]], sizes: Sequence[int], max_command_bytes: int
) -> list[list[int]]:
    """Cut each group of key indices (in order) into commands of at most
    ``min(max_command_bytes, STREAM_CHUNK)`` value bytes; a larger value is alone."""
    limit = min(max_command_bytes, STREAM_CHUNK)
    chunks: list[list[int]] = []
    for group in groups:
        used = limit
        for i in group:
            if used + sizes[i] > limit:
                chunks.append([])
                used = 0
            chunks[-1].append(i)
            used += sizes[i]
    return chunks


def stream_mget(
    c: Connection,
    names: Sequence[bytes],
    sizes: Sequence[int],
    buffers: Sequence[Segments],
    chunks: Sequence[Sequence[int]],
    out: list[Any],
    cancel: CancelGuard | None = None,
    *,
    refused: Callable[[Sequence[int], ReplyError], None] | None = None,
    policy: tuple[int, int, int] = PIPELINED,
) -> None:
    """The read path: read the ``chunks`` (lists of indices into ``names``) with streamed
    ``MGET`` commands on ``c``; ``out[i]`` becomes True for each value received whole into
    ``buffers[i]`` (False for a miss or a size mismatch). Every touch of ``buffers`` runs
    under ``cancel``'s guard. A command refused with an error reply (``NOPERM``,
    ``MOVED``) leaves its keys as they were in ``out`` and is passed to ``refused``.
    ``policy``: the refill policy, :data:`PIPELINED` or :data:`ONE_AT_A_TIME`.

    The replies are read by the compiled engine (:func:`.native.stream`) where it may run,
    else by :func:`stream_python`: both take and return the same state, and stop at an
    error reply, handled here."""
    order = [i for ch in chunks for i in ch]
    keys = [names[i] for i in order]
    values = [buffers[i] for i in order]
    counts = [len(ch) for ch in chunks]
    results = bytearray(len(order))
    engine = native.stream if native.usable(c, cancel) else stream_python
    state = (0, 0, 0)
    while state[0] < len(chunks):
        state, refusal = engine(c, keys, counts, values, results, state, policy, cancel)
        if refusal is not None:
            log.debug("redis MGET refused: %s", refusal)
            if refused is not None:
                refused(chunks[state[0] - 1], refusal)
    for i, r in zip(order, results):
        if r:  # 0: the reply was refused (``refused`` has set ``out``)
            out[i] = r == HIT


def stream_python(
    c: Connection,
    keys: Sequence[bytes],
    counts: Sequence[int],
    values: Sequence[Segments],
    results: bytearray,
    state: tuple[int, int, int],
    policy: tuple[int, int, int],
    cancel: CancelGuard | None,
) -> tuple[tuple[int, int, int], ReplyError | None]:
    """The Python engine of :func:`stream_mget`: ``counts[r]`` keys per command, ``values``
    in the same order; ``results`` gets :data:`.frames.HIT`, ``ABSENT`` or ``MISMATCH`` per
    value. ``state``: ``(reply, sent, ahead)``, replies read, commands sent and value bytes
    requested but not read; returns the state where the run stops (every reply read, or
    just after an error reply, returned with it) and the error."""
    ahead_max, low_water, min_in_flight = policy
    starts = list(accumulate(counts, initial=0))
    weights = [sum(sum(s for _, s in values[v]) for v in range(a, b)) for a, b in pairwise(starts)]
    reply, sent, ahead = state
    while reply < len(counts):
        cmds: list[bytes | memoryview] = []
        # Refill when the queue ran low, then up to AHEAD: a send wakes the server (on a
        # busy machine a context switch), so refills come a few commands at a time.
        refill = sent == reply or ahead < low_water
        while refill and sent < len(counts) and (sent - reply < min_in_flight or ahead < ahead_max):
            cmds.append(command("MGET", *keys[starts[sent] : starts[sent + 1]]))
            ahead += weights[sent]
            sent += 1
        if cmds:
            c.send(cmds)
        ahead -= weights[reply]
        try:
            kind, count = c.header(small=True)
        except ReplyError as e:
            return (reply + 1, sent, ahead), e
        if kind != 0x2A or count != counts[reply]:
            c.broken = True
            raise ProtocolError("redis: MGET reply of the wrong shape")
        for v in range(starts[reply], starts[reply + 1]):
            got = read_bulk_into(c, values[v], cancel)
            results[v] = HIT if got else ABSENT if got is None else MISMATCH
        reply += 1
    return (reply, sent, ahead), None
