"""``RedisTransport``: pages as Redis string values, one value per object.

* ``exists``: one pipelined ``STRLEN`` per key, one round trip (``0`` means absent: no
  stored object is empty).
* ``read``: ``MGET`` commands of at most ``max_command_bytes`` expected value bytes each
  (a page larger than that gets its own), all sent at once: one round trip; every bulk
  value is received straight into the caller's segments (see :mod:`.resp`). A value of
  another size than its buffers is a miss, never a partial page.
* ``write``: one ``SET key value NX [PX ttl]`` per object, all pipelined; the value is sent
  from the caller's memory. ``SET`` is atomic, so a reader sees the whole page or nothing;
  an existing key is left untouched and counts as success (the first writer wins).
* I/O failure (refused, reset, timeout, a server killed mid-batch) raises
  :class:`TransportError` for the whole batch (reason ``"connection"`` / ``"timeout"``);
  the adapter turns it into misses. The connection is discarded, never reused.
* An error reply for one command (``OOM``, ``NOPERM``) fails that command's keys only.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from hicache_sdk import Capabilities, ConfigError, Segments, Transport, TransportError

from .config import RedisConfig, parse_endpoint, redact_url
from .pool import AuthError, Pool
from .resp import CancelGuard, Connection, ProtocolError, ReplyError, command, set_nx_suffix, views_of

__all__ = ["RedisTransport"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_GLOB = str.maketrans({c: "\\" + c for c in "*?[]\\"})


class RedisTransport(Transport):
    """A :class:`Transport` over one standalone Redis server (see the module docs)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        persistent=True,
        shared_across_processes=True,
        eviction=True,
        delete=True,
        health=True,
    )
    #: Reads land in caller memory only through receives that cannot block, each under the
    #: cancel token's guard (the transport kit's cancellable contract).
    cancellable: ClassVar[bool] = True

    def __init__(self, config: RedisConfig, *, probe: bool = True) -> None:
        self.config = config
        self.endpoint = parse_endpoint(config)
        self._prefix = config.key_prefix.encode()
        try:
            self._pool = Pool(self.endpoint, config)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"tls_ca_file / tls_cert_file: cannot load ({type(e).__name__})") from None
        self._ttl_ms = config.ttl_s * 1000
        if probe:
            self._probe()

    # -- construction-time checks --------------------------------------------------------
    def _probe(self) -> None:
        """Fail loudly on misconfiguration the server reveals (wrong credentials, an
        untrusted certificate, a user without rights on the prefix); an unreachable server
        is not an error (the breaker starts open)."""
        try:
            with self._pool.connection() as c:
                c.send([command("STRLEN", self._prefix + b"__hicache_probe__")])
                c.round_trips -= 1
                c.reply()
        except AuthError as e:
            key = "username / password" if self.endpoint.username else "password"
            raise ConfigError(
                f"{key}: the server at {redact_url(self.config.url)} refused them ({e})"
            ) from None
        except ssl.SSLCertVerificationError:
            raise ConfigError(
                f"tls_ca_file: the server certificate at {redact_url(self.config.url)} is not trusted"
            ) from None
        except ReplyError as e:
            if str(e).startswith("NOAUTH"):
                raise ConfigError(
                    f"password: the server at {redact_url(self.config.url)} requires one and none was given"
                ) from None
            if str(e).startswith("NOPERM"):
                raise ConfigError(
                    f"username: this ACL user may not read keys under key_prefix {self.config.key_prefix!r} ({e})"
                ) from None
            raise ConfigError(f"url: the server refused a read ({e})") from None
        except (OSError, ProtocolError) as e:
            log.info(
                "redis at %s unreachable at construction (%s)", redact_url(self.config.url), type(e).__name__
            )

    # -- plumbing ------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[Connection], T]) -> T:
        try:
            with self._pool.connection() as c:
                return fn(c)
        except TransportError:
            raise
        except AuthError as e:
            raise TransportError(f"redis {what}: {e}", reason="auth") from None
        except TimeoutError:
            raise TransportError(f"redis {what}: timed out", reason="timeout") from None
        except (OSError, ProtocolError) as e:
            raise TransportError(f"redis {what}: {type(e).__name__}", reason="connection") from None
        except ReplyError as e:
            reason = "permission" if str(e).startswith("NOPERM") else "server"
            raise TransportError(f"redis {what}: {e}", reason=reason) from None

    @property
    def round_trips(self) -> int:
        """Request flushes that waited for replies (one per ``exists`` / ``read`` / ``write`` batch)."""
        return self._pool.round_trips

    # -- Transport -----------------------------------------------------------------------
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        if not keys:
            return []
        p = self._prefix

        def run(c: Connection) -> list[int | None]:
            c.send([command("STRLEN", p + k.encode()) for k in keys])
            out: list[int | None] = []
            for _ in keys:
                n = c.reply()
                out.append(n if isinstance(n, int) and n > 0 else None)
            return out

        return self._call("exists", run)

    def read(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None = None
    ) -> list[bool]:
        if not keys:
            return []
        chunks: list[list[int]] = []
        size = self.config.max_command_bytes
        used = size
        for i, segs in enumerate(buffers):
            n = sum(s for _, s in segs)
            if used + n > size:
                chunks.append([])
                used = 0
            chunks[-1].append(i)
            used += n
        p = self._prefix

        def run(c: Connection) -> list[bool]:
            c.send([command("MGET", *(p + keys[i].encode() for i in ch)) for ch in chunks])
            out = [False] * len(keys)
            for ch in chunks:
                try:
                    kind, count = c.header()
                except ReplyError as e:
                    log.debug("redis MGET refused: %s", e)
                    continue
                if kind != 0x2A or count != len(ch):
                    c.broken = True
                    raise ProtocolError("redis: MGET reply of the wrong shape")
                for i in ch:
                    out[i] = c.read_bulk_into(buffers[i], cancel) is True
            return out

        return self._call("read", run)

    def write(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None = None
    ) -> list[bool]:
        if not keys:
            return []
        p = self._prefix
        tail, nargs = set_nx_suffix(self._ttl_ms)
        parts: list[bytes | memoryview] = []
        for k, segs in zip(keys, buffers):
            name = p + k.encode()
            n = sum(s for _, s in segs)
            parts.append(b"*%d\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (nargs, len(name), name, n))
            parts.extend(views_of(segs))
            parts.append(tail)

        def run(c: Connection) -> list[bool]:
            c.send(parts)
            out: list[bool] = []
            for _ in keys:
                try:
                    c.reply()  # "OK", or None when the key already existed (NX)
                    out.append(True)
                except ReplyError as e:
                    log.debug("redis SET refused: %s", e)
                    out.append(False)
                    if str(e).startswith("READONLY"):  # a failover demoted this server
                        c.broken = True
                        self._pool.drop_idle()
            return out

        return self._call("write", run)

    def delete(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        names = [self._prefix + k.encode() for k in keys]

        def run(c: Connection) -> None:
            cmds = [command("UNLINK", *names[i : i + 1000]) for i in range(0, len(names), 1000)]
            c.send(cmds)
            for _ in cmds:
                c.reply()

        try:
            self._call("delete", run)
        except TransportError as e:
            log.debug("redis delete failed: %s", e)

    def clear(self, prefix: str) -> None:
        """Remove every key under ``key_prefix + prefix`` (``SCAN`` + ``UNLINK``); errors are
        swallowed (a later clear finishes the job)."""
        pattern = (self.config.key_prefix + prefix).translate(_GLOB).encode() + b"*"

        def run(c: Connection) -> None:
            cursor = b"0"
            while True:
                c.send([command("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)])
                reply: Any = c.reply()
                cursor, names = reply[0], reply[1]
                if names:
                    c.send([command("UNLINK", *names)])
                    c.reply()
                if cursor == b"0":
                    return

        try:
            self._call("clear", run)
        except TransportError as e:
            log.debug("redis clear failed: %s", e)

    def health(self) -> bool:
        def run(c: Connection) -> bool:
            c.send([command("PING")])
            c.reply()  # "+PONG"
            return True

        try:
            return self._call("health", run)
        except TransportError:
            return False

    def close(self) -> None:
        self._pool.close()

    def __repr__(self) -> str:
        return f"RedisTransport(url={redact_url(self.config.url)!r}, key_prefix={self.config.key_prefix!r})"
