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


def test_tls_against_a_plain_server_says_the_handshake_failed(
    tls: tuple[RedisServer, Path, Path], redis_server: RedisServer
) -> None:
    """``rediss://`` with a CA file, pointed at a server that speaks plain RESP: Redis waits
    for the rest of a "command" that is really a TLS ClientHello, so the handshake only
    times out. Construction says so, with the address, instead of starting as
    "unreachable"."""
    _, ca, _ = tls
    url = f"rediss://127.0.0.1:{redis_server.port}/0"
    with pytest.raises(ConfigError) as ei:
        RedisTransport(RedisConfig(url=url, tls_ca_file=str(ca), connect_timeout_s=0.5))
    msg = str(ei.value)
    assert msg.startswith(f"url: TLS handshake with 127.0.0.1:{redis_server.port} failed"), msg
    assert "does not speak TLS on this port" in msg


def test_a_tls_handshake_failure_at_run_time_names_the_address(tls: tuple[RedisServer, Path, Path]) -> None:
    """A data connection whose TLS handshake fails raises a TransportError (reason
    ``tls``) whose message names the handshake and the address: what ``hicache ping`` shows."""
    import socket
    import threading

    from hicache_sdk import TransportError

    srv, ca, _ = tls
    t = RedisTransport(RedisConfig(url=srv.url, tls_ca_file=str(ca), connect_timeout_s=0.5))
    mute = socket.socket()  # a listener that accepts and never answers: a stalled handshake
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    port = mute.getsockname()[1]
    held: list[socket.socket] = []
    acceptor = threading.Thread(target=lambda: held.append(mute.accept()[0]), daemon=True)
    acceptor.start()
    try:
        t._pool.drop_idle()
        t._pool.resolve = lambda: ("127.0.0.1", port)
        a = np.zeros(10, np.uint8)
        with pytest.raises(TransportError) as ei:
            t.read(["k"], [[(int(a.ctypes.data), a.nbytes)]])
        assert ei.value.reason == "tls"
        assert str(ei.value) == f"redis read: TLS handshake with 127.0.0.1:{port} failed: timed out"
    finally:
        t.close()
        mute.close()
        for s in held:
            s.close()
