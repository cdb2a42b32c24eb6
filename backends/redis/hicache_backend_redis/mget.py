"""Streamed ``MGET`` reads: bounded commands, a small window of them in flight.

A batch's keys are cut into ``MGET`` commands of at most ``min(max_command_bytes,
STREAM_CHUNK)`` expected value bytes (a value larger than that gets a command of its own;
keys that must not share a command, such as a cluster's different slots, are kept apart).
The first commands (at least two, and at least ``AHEAD`` bytes of values) are sent in one
flush, one round trip; whenever fewer than ``LOW_WATER`` bytes are still requested, more are
sent (up to ``AHEAD``) as a reply starts, so the server always has the next command queued
but holds only about ``AHEAD`` bytes of replies per connection (512 KiB). A refill wakes the
server, which on a busy machine costs a context switch: refills come a few commands at a
time, not one per reply.

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
from .resp import CancelGuard, Connection, ProtocolError, ReplyError, command

__all__ = ["AHEAD", "LOW_WATER", "STREAM_CHUNK", "chunk_keys", "stream_mget"]

log = logging.getLogger(__name__)

#: Value bytes per streamed ``MGET`` (bounded by ``max_command_bytes`` too).
STREAM_CHUNK = 256 << 10
#: Value bytes requested ahead of the reply being read (at least two commands) ...
AHEAD = 512 << 10
#: ... topped up when fewer than this many are still requested.
LOW_WATER = 256 << 10
#: Commands in flight at least (the one being read included).
MIN_IN_FLIGHT = 2


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
    asking: bool = False,
    refused: Callable[[Sequence[int], ReplyError], None] | None = None,
) -> None:
    """Read the ``chunks`` (lists of indices into ``names``) with streamed ``MGET`` commands
    on ``c``; ``out[i]`` becomes True for each value received whole into ``buffers[i]``
    (False for a miss or a size mismatch). Every touch of ``buffers`` runs under
    ``cancel``'s guard. A command refused with an error reply (``NOPERM``,
    ``MOVED``) leaves its keys False and is passed to ``refused``. ``asking``: each
    ``MGET`` is preceded by ``ASKING`` (a cluster slot being imported). ``counted``: the
    first flush is a round trip of this connection (refills never are). On a plain socket
    with the compiled reader built, the replies are read by it (:mod:`.native_mget`)."""
    if not asking and native_mget.usable(c, cancel):
        policy = (AHEAD, LOW_WATER, MIN_IN_FLIGHT)
        native_mget.stream(c, names, buffers, chunks, out, cancel, policy, counted=counted, refused=refused)
        return
    weights = [sum(sizes[i] for i in ch) for ch in chunks]
    sent = ahead = 0
    for n, ch in enumerate(chunks):
        cmds: list[bytes | memoryview] = []
        # Refill when the queue ran low, then up to AHEAD: a send wakes the server (on a
        # busy machine a context switch), so refills come a few commands at a time.
        refill = sent == n or ahead < LOW_WATER
        while refill and sent < len(chunks) and (sent - n < MIN_IN_FLIGHT or ahead < AHEAD):
            if asking:
                cmds.append(command("ASKING"))
            cmds.append(command("MGET", *(names[i] for i in chunks[sent])))
            ahead += weights[sent]
            sent += 1
        if cmds:
            c.send(cmds, counted=counted and n == 0)
        ahead -= weights[n]
        try:
            if asking:
                c.reply()  # +OK
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
