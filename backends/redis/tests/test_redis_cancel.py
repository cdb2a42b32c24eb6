"""The redis transport's cancellable contract over real sockets: a peer that stalls in
the middle of a value (read) or stops reading in the middle of a command (write). Once the
token's ``cancel()`` has returned, no byte of caller memory is written (read) or read
(write) again, and the connection is never reused. A plain socket's receives and sends stay
blocking under the token (its interrupter shuts the socket down); each test also runs with
the socket non-blocking-only (as over TLS)."""

from __future__ import annotations

import ctypes
import socket
import threading
import time

import pytest
from hicache_backend_redis.bulk import read_bulk_into
from hicache_backend_redis.resp import Connection

from hicache_sdk.errors import Cancelled
from hicache_sdk.kit import CancelToken

VALUE = bytes(range(256)) * 8192  # 2 MiB


def _pair(interruptible: bool) -> tuple[Connection, socket.socket]:
    a, b = socket.socketpair()
    conn = Connection(a, timeout_s=5.0)
    conn.blocking = interruptible  # False: the no-wait calls a TLS socket makes
    return conn, b


MODES = pytest.mark.parametrize("interruptible", [True, False], ids=["interruptible", "nowait"])


@MODES
def test_read_cancelled_mid_value_touches_nothing_after_cancel(interruptible: bool) -> None:
    conn, peer = _pair(interruptible)
    dst = ctypes.create_string_buffer(len(VALUE))
    seg = [(ctypes.addressof(dst), len(VALUE))]
    tok = CancelToken()
    outcome: list[BaseException | bool | None] = []

    def reader() -> None:
        try:
            with conn.watch(tok):  # as the transport runs a call: its waits watch the token too
                outcome.append(read_bulk_into(conn, seg, tok))
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=reader)
    t.start()
    peer.sendall(b"$%d\r\n" % len(VALUE) + VALUE[: len(VALUE) // 2])  # then stall
    time.sleep(0.3)  # the reader has taken what arrived and waits for the rest
    tok.cancel()
    snapshot = dst.raw
    peer.settimeout(2.0)
    try:  # the rest arrives after the cancel (the reader may have stopped reading)
        peer.sendall(VALUE[len(VALUE) // 2 :] + b"\r\n")
    except (TimeoutError, BrokenPipeError):  # BrokenPipe: the interrupter shut the socket
        pass
    t.join(10)
    assert not t.is_alive()
    assert isinstance(outcome[0], Cancelled) and conn.broken
    assert dst.raw == snapshot  # nothing landed after cancel() returned
    assert snapshot[:1024] == VALUE[:1024]  # what arrived before went straight to caller memory
    peer.close()


@MODES
def test_write_cancelled_mid_command_reads_nothing_after_cancel(interruptible: bool) -> None:
    conn, peer = _pair(interruptible)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    big = ctypes.create_string_buffer(b"A" * (32 << 20), 32 << 20)
    view = memoryview(big).cast("B")[: 32 << 20]
    tok = CancelToken()
    outcome: list[BaseException | None] = []

    def writer() -> None:
        try:
            with conn.watch(tok):
                conn.send([b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % len(view), view, b"\r\n"], cancel=tok)
                outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.3)  # the peer reads nothing: the sender is blocked on a full socket buffer
    tok.cancel()
    ctypes.memset(ctypes.addressof(big), ord("Z"), len(view))  # the slots are reused now
    got = bytearray()
    peer.settimeout(1.0)
    while True:  # drain what was sent
        try:
            chunk = peer.recv(1 << 20)
        except TimeoutError:
            break
        if not chunk:
            break
        got += chunk
        if not t.is_alive() and len(chunk) < (1 << 20):
            peer.settimeout(0.2)
    t.join(10)
    assert isinstance(outcome[0], Cancelled)
    assert conn.broken  # a half-sent command: the connection is discarded
    assert b"Z" not in got  # no byte of the reused memory was ever sent
    assert len(got) < len(view)  # the command was cut short
    peer.close()


def test_standalone_and_cluster_transports_declare_themselves_cancellable() -> None:
    from hicache_backend_redis import RedisTransport
    from hicache_backend_redis.cluster_transport import RedisClusterTransport

    assert RedisTransport.cancellable is True and RedisClusterTransport.cancellable is True
