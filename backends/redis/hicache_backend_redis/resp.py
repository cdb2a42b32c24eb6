"""The data connection: RESP2 on a socket of our own, bulk replies straight into caller memory.

It carries the payload path only (``MGET``, create-if-absent ``SET`` / ``SETNX`` and their
replies; ``AUTH`` / ``SELECT`` when it is opened, see :mod:`.pool`); every other command goes
through redis-py. :class:`Connection` owns one socket (TCP, Unix or TLS). Requests are written with
``sendmsg`` (or ``sendall`` over TLS) from a list of buffers, so page bytes are sent from
the caller's memory without a copy. Replies are parsed from a small private buffer, except
bulk values read *into* segments: :func:`.bulk.read_bulk_into` copies what is already
buffered (at most one receive buffer) and ``recv_into``s the rest straight into the
segments' memory.

A plain socket is blocking, bounded by ``SO_RCVTIMEO`` / ``SO_SNDTIMEO`` (and a
``socket_timeout_s`` deadline per reply); a large value is one ``MSG_WAITALL`` receive. A
TLS socket is non-blocking: every receive is ``poll`` then one ``recv_into``. Under a cancel
token (:meth:`Connection.watch`), each receive into caller memory and each send from it runs
inside ``token.guard()`` (which raises once the token is cancelled), so after ``cancel()``
returns no byte of caller memory is touched again. On a plain socket those calls stay
blocking (one ``MSG_WAITALL`` receive per value, as fast as without a token): the token's
interrupter shuts the socket down, which ends a blocked call at once, and the connection is
discarded. Over TLS every call passes no-wait flags instead, so none can block. Waits for
the socket poll in slices of at most ``_CANCEL_POLL_S`` and look at the token between them,
so a cancelled call stops within that time. Any error leaves the connection in an unknown
protocol state: the caller must :meth:`close` it (``broken`` is set).

Large bulk values are not first received into the private buffer: before a value of at
least ``DIRECT_MIN`` bytes, the header (and the previous value's CRLF) is received with a
receive of at most ``HEADER_RECV`` bytes, so nearly all of the value is received by the
kernel straight into the segments (one copy, socket to page).

Edge cases: a null bulk (``$-1``) is a miss; a bulk of another size than the segments is
drained into scratch memory and reported as a size mismatch; an error reply becomes
:class:`ReplyError` (the connection stays usable).
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import time
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from hicache_sdk.errors import Cancelled
from hicache_sdk.kit.segments import memoryviews as views_of

from .frames import CRLF, HEADER_RECV, RECV, CancelGuard, ProtocolError, ReplyError, command

__all__ = ["CancelGuard", "Connection", "ProtocolError", "ReplyError", "command", "views_of"]

_SCRATCH = bytearray(1 << 20)
#: With a cancel token, the longest single poll before the token is looked at again.
_CANCEL_POLL_S = 0.05


class Connection:
    """One RESP connection; not thread-safe (the pool hands it to one caller at a time)."""

    def __init__(self, sock: socket.socket, timeout_s: float, where: str = "") -> None:
        self.sock = sock
        #: The peer's address (``host:port`` or a socket path), for messages.
        self.where = where
        self.tls = isinstance(sock, ssl.SSLSocket)
        #: Plain sockets are blocking, bounded by SO_RCVTIMEO / SO_SNDTIMEO: a value is
        #: received with one ``MSG_WAITALL`` receive (the kernel fills the page as the bytes
        #: arrive, no wake-up per segment), and calls that must not block (under a cancel
        #: token, over TLS) never block. TLS sockets are non-blocking (no flags there).
        self.blocking = not self.tls
        if self.blocking:
            sock.settimeout(None)
        else:
            sock.setblocking(False)
        self.set_timeout(timeout_s)
        self._buf = bytearray(RECV)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self.broken = False
        #: The cancel token of the call using this connection, if any: every wait for the
        #: socket (reply headers included) polls in slices and stops once it is cancelled.
        self.cancel: CancelGuard | None = None
        #: Calls under :attr:`cancel` may block: its interrupter ends them (plain sockets).
        self._interruptible = False
        self._polls: dict[int, Any] = {}

    def set_timeout(self, timeout_s: float) -> None:
        """Bound every wait for the socket by ``timeout_s`` (``SO_RCVTIMEO`` /
        ``SO_SNDTIMEO`` on a plain socket, the poll deadline on every socket)."""
        self.timeout_s = timeout_s
        if self.blocking:
            tv = struct.pack("ll", int(timeout_s), int((timeout_s % 1) * 1e6))
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)

    @contextlib.contextmanager
    def watch(self, cancel: CancelGuard | None) -> Iterator[None]:
        """Run the body with :attr:`cancel` set (every wait looks at it). A plain socket
        registers :meth:`interrupt` with the token, so its receives and sends under the
        token's guard stay blocking; a connection that was interrupted is discarded."""
        if cancel is None:
            yield
            return
        self.cancel = cancel
        remove = cancel.on_cancel(self.interrupt) if self.blocking else None
        self._interruptible = remove is not None
        try:
            yield
        finally:
            self.cancel = None
            self._interruptible = False
            if remove is not None and remove():
                self.broken = True

    def interrupt(self) -> None:
        """End any call blocked on this socket now (from another thread); the connection
        is unusable afterwards."""
        self.broken = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    # -- writing -------------------------------------------------------------------------
    def send(self, parts: Sequence[bytes | memoryview], cancel: CancelGuard | None = None) -> None:
        """Write every part, in order, without copying large parts. With ``cancel``, each
        send (which may read caller memory) runs under its guard."""
        deadline = time.monotonic() + self.timeout_s
        pending = [memoryview(p).cast("B") for p in parts if len(p)]
        i = 0
        while i < len(pending):
            try:
                # TLS sockets have no sendmsg; a plain socket sends many parts per call.
                if cancel is None:
                    n = self._send_some(pending, i)
                else:
                    with cancel.guard():
                        n = self._send_some(pending, i)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                self.wait(select.POLLOUT, deadline)
                continue
            except OSError as e:
                self.lost(e)
            except BaseException:  # Cancelled: the request may be cut short
                self.broken = True
                raise
            while n and i < len(pending):
                if n >= len(pending[i]):
                    n -= len(pending[i])
                    i += 1
                else:
                    pending[i] = pending[i][n:]
                    n = 0

    def _send_some(self, pending: list[memoryview], i: int) -> int:
        if self.tls:
            return self.sock.send(pending[i])
        flags = socket.MSG_DONTWAIT if self.cancel is not None and not self._interruptible else 0
        return self.sock.sendmsg(pending[i : i + 512], [], flags)

    # -- reading -------------------------------------------------------------------------
    def wait(self, events: int, deadline: float) -> None:
        """Wait until the socket is ready for ``events``; ``TimeoutError`` at ``deadline``.
        With a :attr:`cancel` token, poll in short slices and raise (from its guard) once
        it is cancelled."""
        cancel = self.cancel
        p = self._polls.get(events)
        if p is None:  # one poll object per connection and event mask
            p = self._polls[events] = select.poll()
            p.register(self.sock.fileno(), events)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.broken = True
                raise TimeoutError("redis: no reply within socket_timeout_s")
            if cancel is not None:
                left = min(left, _CANCEL_POLL_S)
            if p.poll(left * 1000):
                return
            if cancel is not None:
                try:
                    with cancel.guard():
                        pass
                except BaseException:
                    self.broken = True
                    raise

    def recv_into(self, view: memoryview, deadline: float, whole: bool = False) -> int:
        """Receive into ``view``: at least one byte; all of it when ``whole`` and the
        socket is blocking with no cancel token (``MSG_WAITALL``)."""
        if self.tls:
            flags = 0
        elif self.cancel is not None and not self._interruptible:
            flags = socket.MSG_DONTWAIT
        else:
            flags = socket.MSG_WAITALL if whole else 0
        while True:
            try:
                n = self.sock.recv_into(view, 0, flags) if flags else self.sock.recv_into(view)
            except (BlockingIOError, ssl.SSLWantReadError):
                self.wait(select.POLLIN, deadline)
                continue
            except OSError as e:
                self.lost(e)
            if n == 0:
                self.lost(None)
            return n

    def recv_once(self, view: memoryview) -> int:
        """One receive under a guard: 0 when no byte is ready (or, interruptible, none came
        within ``SO_RCVTIMEO``); interruptible, a blocking ``MSG_WAITALL`` receive, else one
        that cannot block."""
        try:
            if self.tls:
                n = self.sock.recv_into(view)
            else:
                flags = socket.MSG_WAITALL if self._interruptible else socket.MSG_DONTWAIT
                n = self.sock.recv_into(view, 0, flags)
        except (BlockingIOError, ssl.SSLWantReadError):
            return 0
        except OSError as e:
            self.lost(e)
        if n == 0:
            self.lost(None)
        return n

    def lost(self, error: OSError | None) -> NoReturn:
        """The socket failed (``error``) or the server closed it (``None``): the connection
        is broken; a call ended by the token's interrupter (the socket shut down) raises
        :class:`Cancelled`."""
        self.broken = True
        if self._interruptible and self.cancel is not None and self.cancel.cancelled:
            raise Cancelled()
        if error is not None:
            raise error
        raise ConnectionResetError("redis: connection closed by the server")

    def _fill(self, deadline: float, limit: int = RECV) -> None:
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._buf):
            if self._start == 0:
                self.broken = True
                raise ProtocolError("redis: reply header longer than the receive buffer")
            rest = self._end - self._start
            self._buf[:rest] = self._buf[self._start : self._end]
            self._start, self._end = 0, rest
        self._end += self.recv_into(self._view[self._end : self._end + limit], deadline)

    def _line(self, deadline: float, limit: int = RECV) -> bytes:
        while True:
            i = self._buf.find(CRLF, self._start, self._end)
            if i >= 0:
                line = bytes(self._buf[self._start : i])
                self._start = i + 2
                return line
            self._fill(deadline, limit)

    def take(self, n: int, deadline: float, limit: int = RECV) -> bytes:
        while self._end - self._start < n:
            self._fill(deadline, limit)
        out = bytes(self._buf[self._start : self._start + n])
        self._start += n
        return out

    def header(self, small: bool = False) -> tuple[int, int]:
        """Read one reply header: ``(kind, value)`` where kind is one of ``*$:+`` as an
        ordinal; ``+`` replies have value 0; error replies raise :class:`ReplyError`.
        ``small``: receive at most ``HEADER_RECV`` bytes at a time (a large value follows,
        to be received straight into its segments)."""
        deadline = time.monotonic() + self.timeout_s
        line = self._line(deadline, HEADER_RECV if small else RECV)
        if not line:
            self.broken = True
            raise ProtocolError("redis: empty reply line")
        kind = line[0]
        if kind == 0x2D:  # '-'
            raise ReplyError(line[1:].decode(errors="replace"))
        if kind == 0x2B:  # '+'
            return kind, 0
        if kind in (0x2A, 0x24, 0x3A):  # * $ :
            try:
                return kind, int(line[1:])
            except ValueError:
                pass
        self.broken = True
        raise ProtocolError(f"redis: unexpected reply {line[:40]!r}")

    def reply(self) -> int | str | bytes | None:
        """Read one small reply of the payload path: a status (``"OK"``), an integer, a
        bulk string as bytes, or ``None`` (a null bulk). An array is a
        :class:`ProtocolError` (no command of the payload path answers with one)."""
        kind, n = self.header()
        if kind == 0x2B or kind == 0x3A:
            return n if kind == 0x3A else "OK"
        if kind == 0x24:
            if n < 0:
                return None
            data = self.take(n + 2, time.monotonic() + self.timeout_s)
            return data[:-2]
        self.broken = True
        raise ProtocolError("redis: unexpected array reply")

    # -- the receive buffer, for readers of bulk values (:mod:`.bulk`, :mod:`.native`) -----
    @property
    def interruptible(self) -> bool:
        """Whether calls under :attr:`cancel` may block (its interrupter ends them)."""
        return self._interruptible

    def may_block(self, cancel: CancelGuard | None) -> bool:
        """Whether a receive into caller memory under ``cancel`` may be one blocking call:
        a plain socket, with no token or one this connection watches (:meth:`watch`)."""
        return self.blocking and (cancel is None or (self._interruptible and self.cancel is cancel))

    def buffered(self) -> memoryview:
        """The bytes received and not parsed yet (a view: valid until the next receive)."""
        return self._view[self._start : self._end]

    def put_back(self, data: bytes) -> None:
        """Make ``data`` (at most the receive buffer's size) the unparsed bytes, replacing
        what :meth:`buffered` held: what a reader outside this class received past the last
        reply it parsed."""
        if len(data) > len(self._buf):
            self.broken = True
            raise ProtocolError("redis: more bytes put back than the receive buffer holds")
        self._buf[: len(data)] = data
        self._start, self._end = 0, len(data)

    def buffered_into(self, views: list[memoryview], cancel: CancelGuard | None) -> list[memoryview]:
        """Copy what is buffered into the first ``views`` (under ``cancel``'s guard); return
        the views, or the parts of them, still to be filled."""
        have = self._end - self._start
        if not have:
            return views
        left: list[memoryview] = []
        for view in views:
            k = min(have, len(view))
            if k:
                src = self._view[self._start : self._start + k]
                if cancel is None:
                    view[:k] = src
                else:
                    with cancel.guard():
                        view[:k] = src
                self._start += k
                have -= k
            if k < len(view):
                left.append(view[k:])
        return left

    def drain(self, n: int, deadline: float) -> None:
        """Receive and drop ``n`` bytes (a value nobody wants)."""
        have = min(n, self._end - self._start)
        self._start += have
        n -= have
        scratch = memoryview(_SCRATCH)
        while n:
            n -= self.recv_into(scratch[: min(n, len(scratch))], deadline)

    def close(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError):
            self.sock.close()
