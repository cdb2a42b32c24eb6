"""Connecting (TCP / Unix / TLS, ``AUTH``, ``SELECT``) and a bounded connection pool.

:meth:`Pool.connection` lends one :class:`~.resp.Connection` to one caller; a connection
that saw any error (``broken``) is closed instead of returned, so a reply cut short (a
server killed mid-batch, a cancelled read) never poisons the next caller. Waiting for a
free connection is bounded by ``connect_timeout_s``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Literal

from .config import Endpoint, RedisConfig
from .resp import Connection, ReplyError, command

__all__ = ["AuthError", "Pool", "connect", "receive_buffer"]

log = logging.getLogger(__name__)

#: Where Linux publishes the most a process may ask for with ``SO_RCVBUF``.
RMEM_MAX_PATH = "/proc/sys/net/core/rmem_max"
_capped_logged = False


class AuthError(Exception):
    """``AUTH`` or ``SELECT`` was refused (wrong credentials, unknown db): a configuration
    error. ``key`` names the setting at fault when it is not the data password (the
    sentinels' credentials: ``"sentinel_password"``). The message never holds a secret."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def _tls_context(cfg: RedisConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cfg.tls_ca_file)
    if cfg.tls_cert_file and cfg.tls_key_file:
        ctx.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)
    return ctx


def receive_buffer(cfg: RedisConfig) -> int:
    """The ``SO_RCVBUF`` to set on a data connection, or 0 to leave the kernel's autotuning:
    ``cfg.recv_buffer_bytes`` when the kernel lets a process ask for that much
    (``net.core.rmem_max``; unknown outside Linux: asked for anyway, the kernel caps it).
    Capped below it, autotuning is kept (logged once): a buffer locked small would be
    slower than one the kernel grows."""
    global _capped_logged
    want = cfg.recv_buffer_bytes
    if want <= 0:
        return 0
    try:
        with open(RMEM_MAX_PATH, encoding="ascii") as f:
            cap = int(f.read().strip())
    except (OSError, ValueError):
        return want
    if cap >= want:
        return want
    if not _capped_logged:
        _capped_logged = True
        log.info(
            "redis: recv_buffer_bytes=%d is above net.core.rmem_max=%d; keeping the kernel's "
            "receive-buffer autotuning (raise rmem_max, or lower recv_buffer_bytes, to use it)",
            want,
            cap,
        )
    return 0


def _tcp_connect(host: str, port: int, timeout: float, rcvbuf: int) -> socket.socket:
    """``socket.create_connection`` with ``SO_RCVBUF`` set *before* the connect (so the
    window scale agreed in the handshake covers it) and ``TCP_NODELAY`` after."""
    err: OSError | None = None
    for family, kind, proto, _, addr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            if rcvbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.settimeout(timeout)
            sock.connect(addr)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as e:
            sock.close()
            err = e
    raise err if err is not None else OSError(f"getaddrinfo found no address for {host}:{port}")


def connect(ep: Endpoint, cfg: RedisConfig, ctx: ssl.SSLContext | None) -> Connection:
    """Open, authenticate and select the database. ``OSError`` when unreachable,
    :class:`AuthError` when the server refuses the credentials or the db."""
    if ep.sentinels:
        host, port = master_of(ep, cfg)
        ep = dataclasses.replace(ep, host=host, port=port, sentinels=())
    if ep.unix_path:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(cfg.connect_timeout_s)
        try:
            sock.connect(ep.unix_path)
        except OSError:
            sock.close()
            raise
    else:
        sock = _tcp_connect(ep.host, ep.port, cfg.connect_timeout_s, receive_buffer(cfg))
    if ctx is not None:
        try:
            sock = ctx.wrap_socket(sock, server_hostname=ep.host)
        except OSError:
            sock.close()
            raise
    conn = Connection(sock, cfg.socket_timeout_s)
    try:
        hello: list[tuple[str, bytes]] = []
        if ep.password is not None:
            args = ["AUTH", ep.username, ep.password] if ep.username else ["AUTH", ep.password]
            hello.append(("AUTH", command(*args)))
        if ep.db:
            hello.append(("SELECT", command("SELECT", ep.db)))
        if hello:
            conn.send([c for _, c in hello])
            conn.round_trips -= 1  # the handshake is not a batch's round trip
            for what, _ in hello:
                try:
                    conn.reply()
                except ReplyError as e:
                    # The server's message names no secret (e.g. "WRONGPASS invalid ...").
                    raise AuthError(f"{what} refused: {e}") from None
    except BaseException:
        conn.close()
        raise
    return conn


def master_of(ep: Endpoint, cfg: RedisConfig) -> tuple[str, int]:
    """Ask each sentinel in turn for the current master of ``ep.service`` (authenticating
    first with the sentinel credentials when set). ``OSError`` when none knows it;
    :class:`AuthError` (key ``sentinel_password``) when none answered and some refused the
    sentinel credentials, or wanted some and none were given."""
    hello: list[bytes] = []
    if ep.sentinel_password is not None:
        auth = (
            [ep.sentinel_username, ep.sentinel_password] if ep.sentinel_username else [ep.sentinel_password]
        )
        hello.append(command("AUTH", *auth))
    refused: str | None = None
    for host, port in ep.sentinels:
        try:
            sock = socket.create_connection((host, port), timeout=cfg.connect_timeout_s)
        except OSError:
            continue
        c = Connection(sock, cfg.socket_timeout_s)
        try:
            c.send([*hello, command("SENTINEL", "get-master-addr-by-name", ep.service)])
            if hello:
                try:
                    c.reply()
                except ReplyError as e:
                    # e.g. "WRONGPASS invalid username-password pair ..." (names no secret)
                    refused = f"sentinel {host}:{port} refused AUTH: {e}"
                    continue
            try:
                reply = c.reply()
            except ReplyError as e:
                if str(e).startswith(("NOAUTH", "NOPERM")):
                    refused = f"sentinel {host}:{port}: {e}"
                continue
        except OSError:
            continue
        finally:
            c.close()
        if isinstance(reply, list) and len(reply) == 2:
            return reply[0].decode(), int(reply[1])
    if refused is not None:
        raise AuthError(
            refused,
            key="sentinel_username / sentinel_password" if ep.sentinel_username else "sentinel_password",
        )
    raise ConnectionError(f"redis: no sentinel knows the master of {ep.service!r}")


class Pool:
    """At most ``pool_size`` connections, created lazily, reused LIFO."""

    def __init__(self, ep: Endpoint, cfg: RedisConfig) -> None:
        self.ep = ep
        self.cfg = cfg
        self._ctx = _tls_context(cfg) if ep.tls else None
        self._idle: list[Connection] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False
        #: Round trips of connections already closed (see :attr:`round_trips`).
        self._retired_trips = 0

    @property
    def round_trips(self) -> int:
        """Request flushes that waited for replies, over every connection ever opened."""
        with self._cond:
            return self._retired_trips + sum(c.round_trips for c in self._idle)

    def _acquire(self, wait: bool = True) -> Connection | Literal[False] | None:
        """An idle connection, ``None`` (a slot for a new one), or ``False`` when
        ``wait`` is false and the pool is at ``pool_size`` with none idle."""
        deadline = time.monotonic() + self.cfg.connect_timeout_s
        with self._cond:
            while True:
                if self._closed:
                    raise ConnectionError("redis: transport closed")
                if self._idle:
                    return self._idle.pop()
                if self._count < self.cfg.pool_size:
                    self._count += 1
                    return None
                if not wait:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("redis: no free connection within connect_timeout_s")
                self._cond.wait(left)

    def _release(self, conn: Connection | None) -> None:
        with self._cond:
            if conn is None or conn.broken or self._closed:
                self._count -= 1
                if conn is not None:
                    self._retired_trips += conn.round_trips
                    conn.close()
            else:
                self._idle.append(conn)
            self._cond.notify()

    @contextlib.contextmanager
    def connections(self, n: int) -> Iterator[list[Connection]]:
        """Lend 1 to ``n`` connections: the first is waited for as in :meth:`connection`,
        the others are taken only when free now (a batch never waits, nor deadlocks with
        another batch, for its extra connections). Broken ones are closed on return."""
        slots: list[Connection | None] = []
        conns: list[Connection] = []
        try:
            first = self._acquire()
            assert first is not False
            slots.append(first)
            while len(slots) < n:
                more = self._acquire(wait=False)
                if more is False:
                    break
                slots.append(more)
            for c in slots:
                conns.append(c if c is not None else connect(self.ep, self.cfg, self._ctx))
            yield conns
        except BaseException:
            for c in conns:
                c.broken = True
            raise
        finally:
            for i in range(len(slots)):
                self._release(conns[i] if i < len(conns) else None)

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        """Lend a connection; a broken one is closed on return, never reused."""
        conn = self._acquire()
        assert conn is not False
        try:
            if conn is None:
                conn = connect(self.ep, self.cfg, self._ctx)
            yield conn
        except BaseException:
            if conn is not None:
                conn.broken = True
            raise
        finally:
            self._release(conn)

    def drop_idle(self) -> None:
        """Close every idle connection (the master moved: they point at a replica now)."""
        with self._cond:
            for c in self._idle:
                self._retired_trips += c.round_trips
                c.close()
            self._count -= len(self._idle)
            self._idle.clear()
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for c in self._idle:
                self._retired_trips += c.round_trips
                c.close()
            self._count -= len(self._idle)
            self._idle.clear()
            self._cond.notify_all()
