"""The asyncio example's conformance test file, as docs/certifying.md describes one: a
``BackendSuite`` subclass with a ``fault_hooks`` fixture acting on a ``redis-server`` this
module starts on a free loopback port (SIGKILL and a restart on the same port; ``DEBUG
SLEEP`` for a slow server). ``test_async_redis_example.py`` runs it in a subprocess with
``--hicache-level L4`` (this file is not collected by the main run: its name has no
``test_`` prefix)."""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "docs" / "examples"), str(ROOT / "backends" / "redis" / "tests")]

from _redis_servers import RedisServer, call  # noqa: E402
from async_redis_backend import AsyncRedisStorage  # noqa: E402
from hicache_conformance import BackendSuite  # noqa: E402

_SERVER = RedisServer(extra=["--enable-debug-command", "local"])


@pytest.fixture(scope="module", autouse=True)
def _server() -> Iterator[None]:
    _SERVER.start()
    try:
        yield
    finally:
        _SERVER.close()


def _sleep(seconds: float) -> None:
    try:
        call(_SERVER.port, "DEBUG", "SLEEP", f"{seconds:.2f}", timeout=30)
    except Exception:  # killed while sleeping: expected
        pass


class ServerFaults:
    """``stop`` kills the server, ``start`` brings it back empty on the same port,
    ``add_delay`` makes it sleep (in a thread), ``clear_delay`` waits for that to end."""

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


class TestAsyncRedisBackend(BackendSuite):
    backend = AsyncRedisStorage
    declared_capabilities = dataclasses.replace(AsyncRedisStorage.capabilities, fault_injection=True)
    config = {"url": _SERVER.url, "key_prefix": "aredis-l4:", "transfer_timeout_s": 1.0, "op_timeout_s": 2.0}
    matrix = "minimal"
    call_deadline_s = 3.0
    recovery_s = 5.0

    @pytest.fixture
    def fault_hooks(self) -> ServerFaults:
        return ServerFaults()
