"""Sentinel: a master, a replica and one sentinel started here (killed by PID); a
``redis+sentinel://`` transport follows a failover. A sentinel with a password (and an ACL
user) of its own, separate from the master's."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import redis
from _redis_servers import RedisServer, call, free_port
from hicache_backend_redis import RedisConfig, RedisTransport

from hicache_sdk import ConfigError, TransportError


def _call(port: int, *args: str | int) -> Any:
    return call(port, *args)


def _until(pred: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, redis.ConnectionError):
            if pred():  # type: ignore[operator]
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def sentinel_setup() -> Iterator[tuple[RedisServer, RedisServer, int]]:
    master = RedisServer()
    master.start()
    replica = RedisServer(extra=["--replicaof", "127.0.0.1", str(master.port)])
    sport = free_port()
    conf = master.dir / "sentinel.conf"
    conf.write_text(
        f"port {sport}\nbind 127.0.0.1\ndir {master.dir}\n"
        f"sentinel monitor svc 127.0.0.1 {master.port} 1\n"
        "sentinel down-after-milliseconds svc 1000\nsentinel failover-timeout svc 5000\n"
    )
    proc: subprocess.Popen[bytes] | None = None
    try:
        replica.start()
        proc = subprocess.Popen(
            ["redis-server", str(conf), "--sentinel", "--logfile", str(master.dir / "sentinel.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        )  # fmt: skip

        def replica_known() -> bool:
            r = redis.Redis(host="127.0.0.1", port=sport, socket_timeout=10)
            try:
                reps = r.sentinel_slaves("svc")
            finally:
                r.close()
            return len(reps) == 1 and not reps[0]["is_sdown"]

        _until(replica_known, "the sentinel to see the replica")
        yield master, replica, sport
    finally:
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        replica.close()
        master.close()


def _segs(a: np.ndarray) -> list[tuple[int, int]]:
    return [(int(a.ctypes.data), a.nbytes)]


def test_follows_a_failover(sentinel_setup: tuple[RedisServer, RedisServer, int]) -> None:
    master, replica, sport = sentinel_setup
    t = RedisTransport(RedisConfig(url=f"redis+sentinel://127.0.0.1:{sport}/svc", connect_timeout_s=1.0))
    try:
        old = np.full(3000, 7, np.uint8)
        assert t.write(["old"], [_segs(old)]) == [True]
        _until(lambda: _call(master.port, "WAIT", 1, 1000) == 1, "replication")  # before the failover
        assert _call(sport, "SENTINEL", "failover", "svc") in (True, b"OK")

        def moved() -> bool:
            addr = _call(sport, "SENTINEL", "get-master-addr-by-name", "svc")
            return addr is not None and int(addr[1]) == replica.port

        _until(moved, "the failover")
        _until(lambda: _call(replica.port, "ROLE")[0] == b"master", "the replica's promotion")
        # Until the sentinel demotes the old master, writes on pooled connections still land
        # there (Sentinel's own window; lost cache pages become misses). Wait for the demotion.
        _until(lambda: _call(master.port, "ROLE")[0] == b"slave", "the old master's demotion")
        new = np.full(3000, 9, np.uint8)
        # Connections to the demoted server are closed by it (TransportError: the adapter's
        # misses) or answer READONLY (False); either way they are discarded and the next
        # connection asks the sentinel again.
        results: list[object] = []
        for _ in range(3):
            try:
                results.append(t.write(["new"], [_segs(new)]))
            except TransportError as e:
                results.append(e.reason)
        assert results[-1] == [True]
        assert _call(replica.port, "STRLEN", "hicache:new") == 3000  # written on the new master
        out = np.zeros(3000, np.uint8)
        assert t.read(["old"], [_segs(out)]) == [True] and np.array_equal(out, old)
        assert t.read(["new"], [_segs(out)]) == [True] and np.array_equal(out, new)
    finally:
        t.close()


def test_bad_sentinel_urls_name_the_key() -> None:
    for url in (
        "redis+sentinel://127.0.0.1:1",
        "redis+sentinel://127.0.0.1/svc",
        "redis+sentinel://h:1/svc/x",
    ):
        with pytest.raises(ConfigError, match="url"):
            RedisTransport(RedisConfig(url=url))


MASTER_PW = "m4ster-s3cret-pw"
SENTINEL_PW = "s3ntinel-s3cret-pw"


@pytest.fixture(scope="module")
def auth_sentinel() -> Iterator[tuple[RedisServer, int]]:
    """A master with a password and one sentinel with a password of its own (and an ACL
    user ``watcher``), which knows the master's (``sentinel auth-pass``)."""
    master = RedisServer(extra=["--requirepass", MASTER_PW])
    master.start()
    sport = free_port()
    conf = master.dir / "sentinel.conf"
    conf.write_text(
        f"port {sport}\nbind 127.0.0.1\ndir {master.dir}\n"
        f"sentinel monitor svc 127.0.0.1 {master.port} 1\nsentinel auth-pass svc {MASTER_PW}\n"
        f"requirepass {SENTINEL_PW}\nuser watcher on >{SENTINEL_PW} +@all\n"
    )
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = subprocess.Popen(
            ["redis-server", str(conf), "--sentinel", "--logfile", str(master.dir / "sentinel.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        _until(lambda: socket.create_connection(("127.0.0.1", sport), 0.2).close() is None, "the sentinel")
        yield master, sport
    finally:
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        master.close()


def _no_secret(text: str) -> None:
    assert MASTER_PW not in text and SENTINEL_PW not in text


@pytest.mark.parametrize("user", [None, "watcher"])
def test_sentinel_with_its_own_password(
    auth_sentinel: tuple[RedisServer, int], user: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    _, sport = auth_sentinel
    caplog.set_level(logging.DEBUG)
    cfg = RedisConfig(
        url=f"redis+sentinel://127.0.0.1:{sport}/svc",
        password=MASTER_PW,
        sentinel_username=user,
        sentinel_password=SENTINEL_PW,
    )
    t = RedisTransport(cfg)
    try:
        a = np.arange(5000, dtype=np.uint8) % 251
        assert t.write(["auth"], [_segs(a)]) == [True]
        out = np.zeros_like(a)
        assert t.read(["auth"], [_segs(out)]) == [True] and np.array_equal(out, a)
        assert t.exists(["auth", "none"]) == [5000, None]
        for text in (repr(cfg), repr(t), repr(t.endpoint), str(cfg.redacted()), caplog.text):
            _no_secret(text)
    finally:
        t.close()


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"sentinel_password": "wrong-" + SENTINEL_PW}, "sentinel_password"),
        (
            {"sentinel_username": "watcher", "sentinel_password": "wrong"},
            "sentinel_username / sentinel_password",
        ),
        ({}, "sentinel_password"),  # the sentinel wants one: NOAUTH
    ],
)
def test_wrong_or_missing_sentinel_password_is_a_config_error(
    auth_sentinel: tuple[RedisServer, int], kw: dict[str, str], key: str
) -> None:
    _, sport = auth_sentinel
    with pytest.raises(ConfigError, match=f"^{key}:") as ei:
        RedisTransport(RedisConfig(url=f"redis+sentinel://127.0.0.1:{sport}/svc", password=MASTER_PW, **kw))
    _no_secret(str(ei.value))


def test_sentinel_credentials_need_a_sentinel_url() -> None:
    with pytest.raises(ConfigError, match="sentinel_password"):
        RedisTransport(RedisConfig(url="redis://127.0.0.1:1/0", sentinel_password="x"))
