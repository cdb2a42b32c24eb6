"""TLS: a redis-server with ``--tls-port`` and a throwaway CA made here with openssl."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _redis_servers import RedisServer, make_tls_files
from hicache_backend_redis import RedisConfig, RedisTransport

from hicache_sdk import ConfigError

if shutil.which("openssl") is None:  # pragma: no cover - depends on the machine
    pytest.skip("openssl not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, Path, Path]]:
    files = make_tls_files(tmp_path_factory.mktemp("tls"))
    srv = RedisServer(extra=files.server_args(), tls_port=True)
    srv.start()
    try:
        yield srv, files.ca, files.other_ca
    finally:
        srv.close()


def test_tls_round_trip(tls: tuple[RedisServer, Path, Path]) -> None:
    srv, ca, _ = tls
    assert srv.url.startswith("rediss://")
    t = RedisTransport(RedisConfig(url=srv.url, tls_ca_file=str(ca), max_command_bytes=1 << 20))
    try:
        pages = [np.random.default_rng(i).integers(0, 256, 700_000, dtype=np.uint8) for i in range(4)]
        keys = [f"tls{i}" for i in range(4)]
        assert t.write(keys, [[(int(p.ctypes.data), p.nbytes)] for p in pages]) == [True] * 4
        assert t.exists([*keys, "none"]) == [700_000] * 4 + [None]
        out = [np.zeros_like(p) for p in pages]
        assert t.read(keys, [[(int(o.ctypes.data), o.nbytes)] for o in out]) == [True] * 4
        assert all(np.array_equal(a, b) for a, b in zip(out, pages))
    finally:
        t.close()


def test_untrusted_server_certificate_is_a_config_error(tls: tuple[RedisServer, Path, Path]) -> None:
    srv, _, other_ca = tls
    with pytest.raises(ConfigError, match="tls_ca_file"):
        RedisTransport(RedisConfig(url=srv.url, tls_ca_file=str(other_ca)))


def test_missing_ca_file_is_a_config_error(tls: tuple[RedisServer, Path, Path], tmp_path: Path) -> None:
    srv, _, _ = tls
    with pytest.raises(ConfigError, match="tls_ca_file"):
        RedisTransport(RedisConfig(url=srv.url, tls_ca_file=str(tmp_path / "absent.crt")))
