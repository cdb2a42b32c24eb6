"""Session fixtures for the real-SGLang run: the real servers of our redis, s3 and mooncake
backends, started on free 127.0.0.1 ports and stopped by PID, with the helpers those
backends' own test suites use (``backends/{redis,s3,mooncake}/tests``), not copies.

Each server starts on first use only (a run that selects only file-backend tests starts
nothing). Imported by ``conftest.py`` only when ``HICACHE_SGLANG_ENV=1``.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_BACKENDS = Path(__file__).resolve().parents[2] / "backends"
for _sub in ("redis", "s3", "mooncake"):
    _p = str(_BACKENDS / _sub / "tests")
    if _p not in sys.path:
        sys.path.insert(0, _p)
os.environ.setdefault("MC_LOG_LEVEL", "ERROR")

from _redis_servers import RedisServer, redis_server_binary  # noqa: E402
from _server import CREDS, MotoServer  # noqa: E402
from _servers import MooncakeCluster  # noqa: E402

__all__ = ["backend_config", "mooncake_cluster", "moto_server", "redis_server"]

#: Our four backends, by the names an operator passes as ``extra_config["backend"]``.
BACKEND_NAMES = ("file", "redis", "s3", "mooncake")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    if redis_server_binary() is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    srv = RedisServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    srv = MotoServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def mooncake_cluster() -> Iterator[MooncakeCluster]:
    c = MooncakeCluster(holder_bytes=64 << 20)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def backend_config(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """``extra_config["backend_config"]`` for backend ``name`` on this session's server,
    under a namespace of its own (so tests never see each other's pages). Servers are
    requested lazily, so only the backends a run selects start one."""
    ns = uuid.uuid4().hex[:12]
    if name == "file":
        root = tmp_path / f"file-{ns}"
        root.mkdir(mode=0o700)
        return {"root": str(root)}
    if name == "redis":
        srv: RedisServer = request.getfixturevalue("redis_server")
        return {"url": srv.url, "key_prefix": f"t{ns}:"}
    if name == "s3":
        moto: MotoServer = request.getfixturevalue("moto_server")
        bucket = f"b-{ns}"
        moto.make_bucket(bucket)
        return {
            "bucket": bucket,
            "endpoint_url": moto.url,
            "access_key_id": CREDS["aws_access_key_id"],
            "secret_access_key": CREDS["aws_secret_access_key"],
        }
    if name == "mooncake":
        cluster: MooncakeCluster = request.getfixturevalue("mooncake_cluster")
        return cluster.config()
    raise ValueError(f"unknown backend {name!r}; expected one of {BACKEND_NAMES}")
