"""pytest setup for ``tests/lmcache``.

``test_lmcache_keys.py`` and ``test_lmcache_tasks.py`` run everywhere (no LMCache). The
other modules run inside the real LMCache 0.5.x and are collected only when
``HICACHE_LMCACHE_ENV=1`` (set by ``tox -e lmcache``); then LMCache is imported right
here, so a broken LMCache environment fails the run with the import error, never a skip.
Servers (``redis-server``, ``moto_server`` for s3, a ``mooncake_master`` with a holder)
start on first use on free loopback ports and stop by PID.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REAL_LMCACHE = os.environ.get("HICACHE_LMCACHE_ENV") == "1"

collect_ignore = (
    []
    if REAL_LMCACHE
    else [
        "test_l2_adapter.py",
        "test_l2_basic_check.py",
        "test_connector.py",
        "test_l2_check_cli.py",
        "test_l2_contract.py",
        "test_l2_end_to_end.py",
        "test_l2_in_place.py",
    ]
)

if REAL_LMCACHE:
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    os.environ.setdefault("MC_LOG_LEVEL", "ERROR")
    import lmcache.v1.distributed.l2_adapters  # noqa: F401  (fails the run when LMCache is broken)

    for _sub in ("redis", "s3", "mooncake"):
        _p = str(Path(__file__).resolve().parents[2] / "backends" / _sub / "tests")
        if _p not in sys.path:
            sys.path.insert(0, _p)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Any]:
    from _redis_servers import RedisServer, redis_server_binary

    if redis_server_binary() is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    srv = RedisServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Any]:
    from _server import MotoServer

    srv = MotoServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def mooncake_cluster() -> Iterator[Any]:
    from _servers import MooncakeCluster

    c = MooncakeCluster(holder_bytes=512 << 20)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def backend_config(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], dict[str, Any]]:
    """``backend_config(name)``: a fresh, isolated config of our backend ``name``."""

    def make(name: str) -> dict[str, Any]:
        ns = f"t-{os.getpid()}-{id(request.node):x}"
        if name == "file":
            return {"root": str(tmp_path / "kv")}
        if name == "redis":
            srv = request.getfixturevalue("redis_server")
            return {"url": srv.url, "namespace": ns}
        if name == "s3":
            from _server import CREDS

            moto = request.getfixturevalue("moto_server")
            bucket = f"b-{uuid.uuid4().hex[:12]}"
            moto.make_bucket(bucket)
            return {
                "bucket": bucket,
                "endpoint_url": moto.url,
                "access_key_id": CREDS["aws_access_key_id"],
                "secret_access_key": CREDS["aws_secret_access_key"],
            }
        if name == "mooncake":
            cluster = request.getfixturevalue("mooncake_cluster")
            return {**cluster.config(), "namespace": ns}
        raise ValueError(name)

    return make


@pytest.fixture
def adapters() -> Iterator[list[Any]]:
    """Adapters a test built; closed after it."""
    made: list[Any] = []
    yield made
    for a in made:
        a.close()
