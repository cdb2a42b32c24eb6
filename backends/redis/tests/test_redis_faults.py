"""Faults against a redis-server of this module's own: killed mid-batch (the request sent,
the reply not yet), down, restarted empty, unreachable at construction."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from _redis_servers import RedisServer, call, free_port
from hicache_backend_redis import RedisConfig, RedisTransport

from hicache_sdk import TransportError


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer(extra=["--enable-debug-command", "local"])
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


def _sleep_server(srv: RedisServer, seconds: float) -> threading.Thread:
    def run() -> None:
        try:
            call(srv.port, "DEBUG", "SLEEP", seconds)
        except Exception:  # killed while sleeping: expected
            pass

    th = threading.Thread(target=run, daemon=True)
    th.start()
    time.sleep(0.2)
    return th


def _segs(a: np.ndarray) -> list[tuple[int, int]]:
    return [(int(a.ctypes.data), a.nbytes)]


def test_killed_mid_batch_fails_the_batch_then_recovers_empty(server: RedisServer) -> None:
    t = RedisTransport(RedisConfig(url=server.url, socket_timeout_s=5.0, connect_timeout_s=1.0))
    try:
        pages = [np.full(1 << 20, i, np.uint8) for i in range(16)]
        keys = [f"p{i}" for i in range(16)]
        assert t.write(keys, [_segs(p) for p in pages]) == [True] * 16
        out = [np.zeros(1 << 20, np.uint8) for _ in keys]
        sleeper = _sleep_server(server, 3)
        err: list[BaseException] = []

        def read() -> None:
            try:
                t.read(keys, [_segs(o) for o in out])
            except BaseException as e:
                err.append(e)

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.2)  # the MGETs are sent; the server sleeps before answering
        server.stop()  # SIGKILL mid-batch
        reader.join(10)
        sleeper.join(10)
        assert not reader.is_alive()
        assert len(err) == 1 and isinstance(err[0], TransportError) and err[0].reason == "connection"
        # Down: fails at once (connection refused), never hangs.
        with pytest.raises(TransportError):
            t.exists(keys)
        assert t.health() is False
        # Restarted, empty: the same object serves misses, then writes and reads again.
        server.start()
        assert t.health() is True
        assert t.exists(keys) == [None] * 16
        assert t.read(keys[:1], [_segs(out[0])]) == [False]
        assert t.write(keys[:1], [_segs(pages[3])]) == [True]
        assert t.read(keys[:1], [_segs(out[0])]) == [True]
        assert np.array_equal(out[0], pages[3])
    finally:
        t.close()


def test_no_reply_within_socket_timeout_is_a_timeout(server: RedisServer) -> None:
    t = RedisTransport(RedisConfig(url=server.url, socket_timeout_s=0.5))
    try:
        assert t.exists(["a"]) == [None]
        sleeper = _sleep_server(server, 1.5)
        with pytest.raises(TransportError) as ei:
            t.exists(["a"])
        assert ei.value.reason == "timeout"  # bounded by socket_timeout_s, not by the sleep
        sleeper.join(10)
        assert t.exists(["a"]) == [None]  # the timed-out connection was discarded
    finally:
        t.close()


def test_unreachable_at_construction_is_not_an_error() -> None:
    port = free_port()
    t = RedisTransport(RedisConfig(url=f"redis://127.0.0.1:{port}/0", connect_timeout_s=0.5))
    srv = RedisServer()
    srv.port = port
    try:
        assert t.health() is False
        with pytest.raises(TransportError):
            t.exists(["a"])
        srv.start()
        assert t.health() is True
        assert t.exists(["a"]) == [None]
    finally:
        t.close()
        srv.close()


def test_io_failures_are_declared_and_name_the_address() -> None:
    """redis-py's I/O exceptions are the transports' ``io_errors``; a refused connection is
    a TransportError (reason ``connection``) whose message names the address, on the data
    path (our sockets) and on redis-py's (exists)."""
    import redis
    from hicache_backend_redis.cluster_transport import RedisClusterTransport

    for cls in (RedisTransport, RedisClusterTransport):
        assert {redis.ConnectionError, redis.TimeoutError} <= set(cls.io_errors)
        assert issubclass(redis.AuthenticationError, cls.io_errors)
    port = free_port()
    t = RedisTransport(RedisConfig(url=f"redis://127.0.0.1:{port}/0", connect_timeout_s=0.5))
    try:
        a = np.zeros(10, np.uint8)
        for call_ in (
            lambda: t.read(["k"], [_segs(a)]),
            lambda: t.write(["k"], [_segs(a)]),
            lambda: t.exists(["k"]),
        ):
            with pytest.raises(TransportError) as ei:
                call_()
            assert ei.value.reason == "connection"
            assert str(ei.value).endswith(f": connection refused: 127.0.0.1:{port}"), str(ei.value)
    finally:
        t.close()
