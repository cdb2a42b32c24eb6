"""The conformance suite on the redis backend against a real redis-server of this module's
own (so L4 can kill and restart it): once under the default key scheme (L4 included: a
SIGKILL and a restart, empty, on the same port; ``DEBUG SLEEP`` for a slow server) and once
under ``sglang-mooncake`` (a private key prefix per test namespace). ``raw_pages`` reads
the objects out of band under the key prefix."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _redis_servers import RedisServer, call
from hicache_backend_redis import RedisStorage
from hicache_conformance import BackendSuite

_SERVER = RedisServer(extra=["--enable-debug-command", "local"])
_PREFIX = "conf:"


@pytest.fixture(scope="module", autouse=True)
def _redis_for_conformance() -> Iterator[None]:
    _SERVER.start()
    try:
        yield
    finally:
        _SERVER.close()


def _call(*args: bytes | str | int) -> Any:
    return call(_SERVER.port, *args, timeout=30)


class RedisRawObjects:
    """Objects as keys ``key_prefix + name`` on the module's server."""

    def _prefix(self, backend: Any) -> str:
        return str(backend.raw_transport.config.key_prefix)

    def names(self, backend: Any) -> list[str]:
        import redis

        p = self._prefix(backend)
        r = redis.Redis(host="127.0.0.1", port=_SERVER.port)
        try:
            return sorted(
                k.decode()[len(p) :] for k in r.scan_iter(match=p.replace("*", "\\*") + "*", count=1000)
            )
        finally:
            r.close()

    def get(self, backend: Any, name: str) -> bytes | None:
        v = _call("GET", self._prefix(backend) + name)
        return v if isinstance(v, bytes) else None

    def put(self, backend: Any, name: str, data: bytes) -> None:
        _call("SET", self._prefix(backend) + name, data)

    def delete(self, backend: Any, name: str) -> None:
        _call("DEL", self._prefix(backend) + name)


def _sleep(seconds: float) -> None:
    try:
        _call("DEBUG", "SLEEP", f"{seconds:.2f}")
    except Exception:  # killed while sleeping (L4 stops the server): expected
        pass


class ServerFaults:
    """L4 hooks: ``stop`` kills the server (SIGKILL), ``start`` brings it back empty on
    the same port; ``add_delay`` makes it sleep (``DEBUG SLEEP``) in a thread."""

    def __init__(self) -> None:
        self._sleeper: threading.Thread | None = None

    def stop(self) -> None:
        _SERVER.stop()

    def start(self) -> None:
        _SERVER.start()

    def add_delay(self, seconds: float) -> None:
        self._sleeper = threading.Thread(target=_sleep, args=(seconds,), daemon=True)
        self._sleeper.start()

    def clear_delay(self) -> None:
        if self._sleeper is not None:
            self._sleeper.join(30)
            self._sleeper = None


class TestRedisBackend(BackendSuite):
    backend = RedisStorage
    declared_capabilities = dataclasses.replace(RedisStorage.capabilities, fault_injection=True)
    config = {
        "url": _SERVER.url,
        "key_prefix": _PREFIX,
        "transfer_timeout_s": 1.0,
        "socket_timeout_s": 2.0,
        "connect_timeout_s": 1.0,
    }
    call_deadline_s = 3.0
    recovery_s = 5.0

    @pytest.fixture
    def fault_hooks(self) -> ServerFaults:
        return ServerFaults()

    @pytest.fixture
    def raw_pages(self) -> RedisRawObjects:
        return RedisRawObjects()


class TestRedisBackendSGLangMooncake(TestRedisBackend):
    """SGLang's Mooncake key names (no namespace): a private key prefix per test namespace."""

    transport_tests = False  # the base class runs them on the same transport
    # L3 (concurrency) and L4 (faults) exercise the transport and the resilience layer, not
    # the names: the base class runs them on the same store
    levels = ("L0", "L1", "L2", "stateful")

    config = {**TestRedisBackend.config, "key_scheme": "sglang-mooncake"}
    declared_capabilities = None
    matrix = "minimal"
    stateful_examples = 5

    def namespace_config(self, namespace: str) -> dict[str, Any]:
        return {"key_prefix": f"{_PREFIX}{namespace}:"}
