"""TLS: a redis-server with ``--tls-port`` and a throwaway CA made here with openssl."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _redis_servers import RedisServer
from hicache_backend_redis import RedisConfig, RedisTransport

from hicache_sdk import ConfigError

if shutil.which("openssl") is None:  # pragma: no cover - depends on the machine
    pytest.skip("openssl not installed", allow_module_level=True)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    key, crt = d / f"{name}.key", d / f"{name}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)  # fmt: skip
    return key, crt


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, Path, Path]]:
    d = tmp_path_factory.mktemp("tls")
    ca_key, ca_crt = _ca(d, "test-ca")
    _, other_ca = _ca(d, "other-ca")
    key, csr, crt, ext = d / "server.key", d / "server.csr", d / "server.crt", d / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(key), "-out", str(csr)], check=True, capture_output=True)  # fmt: skip
    subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
                    "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(crt)],
                   check=True, capture_output=True)  # fmt: skip
    srv = RedisServer(
        extra=["--tls-cert-file", str(crt), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca_crt),
               "--tls-auth-clients", "no"],
        tls_port=True,
    )  # fmt: skip
    srv.start()
    try:
        yield srv, ca_crt, other_ca
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
