"""``recv_buffer_bytes``: ``SO_RCVBUF`` of the data connections, set before the connect where
``net.core.rmem_max`` allows it, else the kernel's autotuning is kept (logged once)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hicache_backend_redis import RedisConfig, RedisTransport
from hicache_backend_redis import pool as pool_mod

Make = Callable[..., RedisTransport]


def _cap() -> int | None:
    try:
        return int(Path(pool_mod.RMEM_MAX_PATH).read_text().strip())
    except (OSError, ValueError):
        return None


def _rcvbuf(t: RedisTransport) -> int:
    with t._pool.connection() as c:  # the socket itself is what is under test
        return int(c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))


@pytest.fixture
def rmem_max(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    def set_to(text: str) -> None:
        f = tmp_path / "rmem_max"
        f.write_text(text)
        monkeypatch.setattr(pool_mod, "RMEM_MAX_PATH", str(f))
        monkeypatch.setattr(pool_mod, "_capped_logged", False)

    return set_to


def test_the_buffer_is_asked_for_only_where_the_kernel_allows_it(
    rmem_max: Callable[[str], None], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = RedisConfig(recv_buffer_bytes=4 << 20)
    rmem_max("8388608\n")
    assert pool_mod.receive_buffer(cfg) == 4 << 20
    rmem_max("4194304")  # exactly enough
    assert pool_mod.receive_buffer(cfg) == 4 << 20
    rmem_max("212992")  # a stock kernel: keep autotuning, say so once
    with caplog.at_level(logging.INFO, logger=pool_mod.__name__):
        assert pool_mod.receive_buffer(cfg) == 0
        assert pool_mod.receive_buffer(cfg) == 0
    said = [r.getMessage() for r in caplog.records if "rmem_max" in r.getMessage()]
    assert len(said) == 1 and "recv_buffer_bytes=4194304" in said[0] and "212992" in said[0]
    assert pool_mod.receive_buffer(RedisConfig(recv_buffer_bytes=0)) == 0
    monkeypatch.setattr(pool_mod, "RMEM_MAX_PATH", "/nonexistent/rmem_max")  # not Linux
    assert pool_mod.receive_buffer(cfg) == 4 << 20


def test_connections_carry_the_buffer(make_transport: Make, request: pytest.FixtureRequest) -> None:
    cap = _cap()
    if cap is None:
        pytest.skip("no /proc/sys/net/core/rmem_max here")
    want = min(1 << 20, cap)
    t = make_transport(recv_buffer_bytes=want, key_prefix=f"{request.node.name}:")
    got = _rcvbuf(t)
    assert want <= got <= 2 * want  # Linux doubles it for its own bookkeeping
    # the connection works: a value larger than the buffer goes through whole
    src = np.random.default_rng(7).integers(0, 256, 3 * want, dtype=np.uint8)
    dst = np.zeros_like(src)
    assert t.write(["big"], [[(src.ctypes.data, src.nbytes)]]) == [True]
    assert t.read(["big"], [[(dst.ctypes.data, dst.nbytes)]]) == [True]
    assert np.array_equal(dst, src)


def test_zero_or_a_capped_kernel_leaves_autotuning(
    make_transport: Make, rmem_max: Callable[[str], None]
) -> None:
    try:
        default = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        pytest.skip("no /proc/sys/net/ipv4/tcp_rmem here")
    assert _rcvbuf(make_transport(recv_buffer_bytes=0)) == default
    rmem_max("65536")
    assert _rcvbuf(make_transport(recv_buffer_bytes=1 << 20)) == default
