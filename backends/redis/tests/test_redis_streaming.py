"""The read/write hot path on a server of its own: large batches split over concurrent
connections, streamed MGETs that keep the server's reply memory small, and cancellation
(a token's guard around every touch of caller memory; cancelled waits stop early)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _redis_servers import RedisServer, call
from hicache_backend_redis import RedisConfig, RedisTransport

from hicache_sdk.errors import Cancelled
from hicache_sdk.kit import CancelToken


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer(extra=["--enable-debug-command", "yes"])
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


def _raw(srv: RedisServer, *args: str | int) -> Any:
    return call(srv.port, *args)


def _info(srv: RedisServer, section: str, field: str) -> int:
    return int(_raw(srv, "INFO", section)[field])


def _pages(n: int, size: int) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
    a = np.random.default_rng(n + size).integers(0, 256, n * size, dtype=np.uint8)
    return a, [[(int(a.ctypes.data) + i * size, size)] for i in range(n)]


class Token(CancelToken):
    """The kit's cancel token, counting guarded touches of caller memory."""

    def __init__(self) -> None:
        super().__init__()
        self.guards = 0
        self._count = threading.Lock()

    def guard(self) -> Any:
        with self._count:
            self.guards += 1
        return super().guard()


def test_large_batches_run_on_concurrent_connections(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hicache_backend_redis import mget, node_io

    policies: list[tuple[int, int, int]] = []

    def spy(*args: Any, policy: tuple[int, int, int], **kw: Any) -> None:
        policies.append(policy)
        mget.stream_mget(*args, policy=policy, **kw)

    monkeypatch.setattr(node_io, "stream_mget", spy)
    t = RedisTransport(RedisConfig(url=server.url, parallel_connections=3, pool_size=8, write_window=0))
    try:
        src, segs = _pages(12, 1 << 20)  # 12 MiB: three parts of 4 MiB
        keys = [f"p{i}" for i in range(12)]
        t.exists(["warm"])
        before = t.metrics.counter("round_trips")
        assert t.write(keys, segs) == [True] * 12
        # three data connections, redis-py's (the exists above), and the INFO one
        assert _info(server, "clients", "connected_clients") == 3 + 1 + 1
        out, osegs = _pages(12, 1 << 20)
        out[:] = 0
        assert t.read(keys, osegs) == [True] * 12
        assert np.array_equal(out, src)
        # the parts run concurrently: the batch waits one round trip, counted once
        assert t.metrics.counter("round_trips") == before + 2
        # each part keeps one command in flight (see mget.ONE_AT_A_TIME)
        assert policies == [mget.ONE_AT_A_TIME] * 3
        # small batches stay on one connection, pipelined
        assert t.read(keys[:1], osegs[:1]) == [True]
        assert t.metrics.counter("round_trips") == before + 3
        assert policies[3:] == [mget.PIPELINED]
    finally:
        t.close()


def test_streamed_reads_keep_the_server_reply_memory_small(server: RedisServer) -> None:
    """64 x 256 KiB (16 MiB) read with one connection: the server's peak memory grows by
    about two pages' replies, not by the batch (a single MGET: about 16 MiB)."""
    t = RedisTransport(RedisConfig(url=server.url, parallel_connections=1))
    try:
        src, segs = _pages(64, 256 << 10)
        keys = [f"s{i}" for i in range(64)]
        assert t.write(keys, segs) == [True] * 64
        peak = _info(server, "memory", "used_memory_peak")
        out, osegs = _pages(64, 256 << 10)
        assert t.read(keys, osegs) == [True] * 64
        assert np.array_equal(out, src)
        assert _info(server, "memory", "used_memory_peak") - peak < 4 << 20
    finally:
        t.close()


def test_concurrent_batches_share_a_small_pool(server: RedisServer) -> None:
    """Extra connections are taken only when free: two callers with pool_size 2 and
    parallel_connections 4 neither wait for each other's parts nor deadlock."""
    t = RedisTransport(
        RedisConfig(url=server.url, parallel_connections=4, pool_size=2, connect_timeout_s=1.0)
    )
    try:
        src, segs = _pages(16, 512 << 10)
        keys = [f"c{i}" for i in range(16)]
        assert t.write(keys, segs) == [True] * 16
        results: list[bool] = []

        def reader() -> None:
            out, osegs = _pages(16, 512 << 10)
            for _ in range(5):
                out[:] = 0
                results.append(t.read(keys, osegs) == [True] * 16 and np.array_equal(out, src))

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert results == [True] * 15
    finally:
        t.close()


def test_cancelled_before_any_byte_touches_nothing(server: RedisServer) -> None:
    t = RedisTransport(RedisConfig(url=server.url, parallel_connections=4))
    try:
        src, segs = _pages(16, 512 << 10)
        keys = [f"x{i}" for i in range(16)]
        assert t.write(keys, segs) == [True] * 16
        out, osegs = _pages(16, 512 << 10)
        out[:] = 0
        tok = Token()
        tok.cancel()
        with pytest.raises(Cancelled):
            t.read(keys, osegs, tok)
        assert not out.any()  # not one byte landed
        with pytest.raises(Cancelled):
            t.write([f"y{i}" for i in range(16)], segs, tok)
        assert t.exists([f"y{i}" for i in range(16)]) == [None] * 16  # no value was sent whole
        # the cancelled connections were discarded; the transport still works
        assert t.read(keys, osegs) == [True] * 16
        assert np.array_equal(out, src)
    finally:
        t.close()


def test_a_cancel_stops_a_read_waiting_on_a_slow_server(server: RedisServer) -> None:
    t = RedisTransport(RedisConfig(url=server.url, parallel_connections=4, socket_timeout_s=10.0))
    try:
        src, segs = _pages(16, 512 << 10)
        keys = [f"w{i}" for i in range(16)]
        assert t.write(keys, segs) == [True] * 16
        out, osegs = _pages(16, 512 << 10)
        out[:] = 0
        tok = Token()
        sleeper = threading.Thread(target=_raw, args=(server, "DEBUG", "SLEEP", 2))
        sleeper.start()
        time.sleep(0.2)  # the server is asleep: the read's commands wait in its socket
        threading.Timer(0.3, tok.cancel).start()
        t0 = time.monotonic()
        with pytest.raises(Cancelled):
            t.read(keys, osegs, tok)
        took = time.monotonic() - t0
        sleeper.join(10)
        assert took < 1.2  # stopped at the cancel (0.3 s), not when the server woke (about 1.8 s)
        assert not out.any()
        assert t.read(keys, osegs) == [True] * 16 and np.array_equal(out, src)
    finally:
        t.close()


def test_a_guarded_read_lands_whole(server: RedisServer) -> None:
    t = RedisTransport(RedisConfig(url=server.url, parallel_connections=4))
    try:
        src, segs = _pages(16, 512 << 10)
        keys = [f"g{i}" for i in range(16)]
        tok = Token()
        assert t.write(keys, segs, tok) == [True] * 16
        out, osegs = _pages(16, 512 << 10)
        out[:] = 0
        assert t.read(keys, osegs, tok) == [True] * 16
        # every part of the write and of the read ran under the guard (at least once each)
        assert np.array_equal(out, src) and tok.guards >= 2 * 4
    finally:
        t.close()
