"""Fixtures: one standalone ``redis-server`` for the session (started here, killed by PID),
and fresh transports on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _redis_servers import RedisServer, redis_server_binary
from hicache_backend_redis import RedisConfig, RedisTransport

if redis_server_binary() is None:  # pragma: no cover - depends on the machine
    pytest.skip("redis-server not installed (apt-get install redis-server)", allow_module_level=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    srv = RedisServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def make_transport(redis_server: RedisServer) -> Iterator[Callable[..., RedisTransport]]:
    made: list[RedisTransport] = []

    def make(**kw: Any) -> RedisTransport:
        kw.setdefault("url", redis_server.url)
        t = RedisTransport(RedisConfig(**kw))
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()
