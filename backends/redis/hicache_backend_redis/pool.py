"""The data connections: opened to the node redis-py resolved, and a bounded pool of them.

The pages themselves move over sockets of our own (:class:`~.resp.Connection`), never
over redis-py's, so the reader can receive values straight into page memory. Opening one
is what any Redis client does on connect: TCP (``SO_RCVBUF`` set before the connect, see
:func:`receive_buffer`) or a Unix socket, TLS with the context built from the same
settings redis-py's connections get (:func:`~.config.tls_context`), then ``AUTH`` and
``SELECT`` with the credentials and database redis-py parsed from the URL. All of it is
bounded by ``connect_timeout_s``. Where to connect is asked anew for every connection
(``resolve``): a fixed address, or the master a sentinel names now.

:meth:`Pool.connection` lends one connection to one caller; a connection that saw any error
(``broken``) is closed instead of returned, so a reply cut short (a server killed mid-batch,
a cancelled read) never poisons the next caller. Waiting for a free connection is bounded by
``connect_timeout_s``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Literal, Union

from .config import Endpoint, RedisConfig
from .frames import command
from .resp import Connection, ReplyError

__all__ = ["Address", "DialError", "Pool", "dial", "receive_buffer", "where"]

log = logging.getLogger(__name__)

#: ``(host, port)``, or the path of a Unix socket.
Address = Union[tuple[str, int], str]
#: Where Linux publishes the most a process may ask for with ``SO_RCVBUF``.
RMEM_MAX_PATH = "/proc/sys/net/core/rmem_max"
_capped_logged = False


def where(address: Address) -> str:
    """``host:port`` or the socket path: how an address appears in messages."""
    return address if isinstance(address, str) else f"{address[0]}:{address[1]}"


class DialError(OSError):
    """A data connection could not be set up. ``reason``: ``"connection"``, ``"timeout"``,
    ``"tls"`` (the handshake failed), ``"tls_verify"`` (the server's certificate is not
    trusted) or ``"auth"`` (``AUTH`` / ``SELECT`` refused; ``key`` names the setting). The
    message names the address and never holds a secret."""

    def __init__(self, message: str, reason: str, key: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.key = key


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


def _socket(address: Address, timeout: float, rcvbuf: int) -> socket.socket:
    """A connected socket: ``SO_RCVBUF`` set *before* the connect (so the window scale
    agreed in the handshake covers it), ``TCP_NODELAY`` after."""
    if isinstance(address, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(address)
        except OSError:
            sock.close()
            raise
        return sock
    err: OSError | None = None
    for family, kind, proto, _, addr in socket.getaddrinfo(*address, 0, socket.SOCK_STREAM):
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
    raise err if err is not None else OSError(f"no address found for {where(address)}")


def _why(e: OSError) -> str:
    if isinstance(e, TimeoutError):
        return "timed out"
    return (e.strerror or str(e) or type(e).__name__).lower()


def dial(address: Address, ep: Endpoint, cfg: RedisConfig, ctx: ssl.SSLContext | None) -> Connection:
    """Open, secure, authenticate and select the database, within ``connect_timeout_s``.
    Raises :class:`DialError` (the address in its message)."""
    at = where(address)
    deadline = time.monotonic() + cfg.connect_timeout_s
    try:
        sock = _socket(address, cfg.connect_timeout_s, receive_buffer(cfg))
    except TimeoutError:
        raise DialError(f"connect to {at} timed out", "timeout") from None
    except OSError as e:
        raise DialError(f"{_why(e)}: {at}", "connection") from None
    if ctx is not None:
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock = ctx.wrap_socket(sock, server_hostname=address[0] if isinstance(address, tuple) else None)
        except ssl.SSLCertVerificationError as e:
            sock.close()
            raise DialError(
                f"TLS handshake with {at} failed: the server's certificate is not trusted ({e.verify_message})",
                "tls_verify",
                key="tls_ca_file",
            ) from None
        except OSError as e:
            sock.close()
            raise DialError(f"TLS handshake with {at} failed: {_why(e)}", "tls") from None
    conn = Connection(sock, min(cfg.socket_timeout_s, cfg.connect_timeout_s), where=at)
    try:
        hello: list[tuple[str, bytes]] = []
        if ep.password is not None:
            args = ["AUTH", ep.username, ep.password] if ep.username else ["AUTH", ep.password]
            hello.append(("AUTH", command(*args)))
        if ep.db:
            hello.append(("SELECT", command("SELECT", ep.db)))
        if hello:
            conn.send([c for _, c in hello])
            for what, _ in hello:
                try:
                    conn.reply()
                except ReplyError as e:
                    # The server's message names no secret (e.g. "WRONGPASS invalid ...").
                    key = "db" if what == "SELECT" else "username / password" if ep.username else "password"
                    raise DialError(f"{what} refused by {at}: {e}", "auth", key=key) from None
    except DialError:
        conn.close()
        raise
    except TimeoutError:
        conn.close()
        raise DialError(f"no answer from {at} to AUTH / SELECT within connect_timeout_s", "timeout") from None
    except OSError as e:
        conn.close()
        raise DialError(f"{_why(e)}: {at}", "connection") from None
    conn.set_timeout(cfg.socket_timeout_s)
    return conn


class Pool:
    """At most ``pool_size`` data connections to whatever ``resolve`` names, created
    lazily, reused LIFO."""

    def __init__(
        self, resolve: Callable[[], Address], ep: Endpoint, cfg: RedisConfig, ctx: ssl.SSLContext | None
    ) -> None:
        self.resolve = resolve
        self.ep = ep
        self.cfg = cfg
        self.ctx = ctx
        #: The address of the last connection opened (for messages).
        self.where = ""
        self._idle: list[Connection] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False

    def dial(self) -> Connection:
        address = self.resolve()
        self.where = where(address)
        return dial(address, self.ep, self.cfg, self.ctx)

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
                conns.append(c if c is not None else self.dial())
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
        with self.connections(1) as cs:
            yield cs[0]

    def drop_idle(self) -> None:
        """Close every idle connection (the master moved: they point at a replica now)."""
        with self._cond:
            for c in self._idle:
                c.close()
            self._count -= len(self._idle)
            self._idle.clear()
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
        self.drop_idle()
