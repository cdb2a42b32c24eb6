"""Streamed ``MGET`` reads: bounded commands, a small window of them in flight.

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
from typing import Any

from hicache_sdk.kit.segments import Segments

from . import native_mget
from .frames import CancelGuard, ProtocolError, ReplyError, command
from .resp import Connection

__all__ = ["AHEAD", "LOW_WATER", "ONE_AT_A_TIME", "PIPELINED", "STREAM_CHUNK", "chunk_keys", "stream_mget"]

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
    counted: bool = True,
    refused: Callable[[Sequence[int], ReplyError], None] | None = None,
    policy: tuple[int, int, int] = PIPELINED,
) -> None:
    """Read the ``chunks`` (lists of indices into ``names``) with streamed ``MGET`` commands
    on ``c``; ``out[i]`` becomes True for each value received whole into ``buffers[i]``
    (False for a miss or a size mismatch). Every touch of ``buffers`` runs under
    ``cancel``'s guard. A command refused with an error reply (``NOPERM``,
    ``MOVED``) leaves its keys False and is passed to ``refused``. ``counted``: the
    first flush is a round trip of this connection (refills never are). ``policy``: the
    refill policy, :data:`PIPELINED` or :data:`ONE_AT_A_TIME`. On a plain socket with the
    compiled reader built, the replies are read by it (:mod:`.native_mget`)."""
    if native_mget.usable(c, cancel):
        native_mget.stream(c, names, buffers, chunks, out, cancel, policy, counted=counted, refused=refused)
        return
    weights = [sum(sizes[i] for i in ch) for ch in chunks]
    ahead_max, low_water, min_in_flight = policy
    sent = ahead = 0
    for n, ch in enumerate(chunks):
        cmds: list[bytes | memoryview] = []
        # Refill when the queue ran low, then up to AHEAD: a send wakes the server (on a
        # busy machine a context switch), so refills come a few commands at a time.
        refill = sent == n or ahead < low_water
        while refill and sent < len(chunks) and (sent - n < min_in_flight or ahead < ahead_max):
            cmds.append(command("MGET", *(names[i] for i in chunks[sent])))
            ahead += weights[sent]
            sent += 1
        if cmds:
            c.send(cmds, counted=counted and n == 0)
        ahead -= weights[n]
        try:
            kind, count = c.header(small=True)
        except ReplyError as e:
            log.debug("redis MGET refused: %s", e)
            if refused is not None:
                refused(ch, e)
            continue
        if kind != 0x2A or count != len(ch):
            c.broken = True
            raise ProtocolError("redis: MGET reply of the wrong shape")
        for i in ch:
            out[i] = c.read_bulk_into(buffers[i], cancel) is True
