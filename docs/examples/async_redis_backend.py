"""``aredis``: a complete backend over an asyncio-only client library (``redis.asyncio``).

This file is the example of "Asyncio-only client libraries" in ``docs/writing-a-backend.md``;
``tests/docs/test_async_redis_example.py`` certifies it with ``hicache check`` (a subprocess,
levels L0 to L4) against a real ``redis-server``, and with L4's fault injection (the server
killed, restarted and slowed) through a ``BackendSuite`` test file. Copy it, swap the client.

The transport is synchronous and thread-safe, as every transport must be; the client is not.
:class:`~hicache_sdk.kit.EventLoopThread` bridges the two: one event loop on a thread of its
own per transport, the client built and used only there, and each transport call one
``loop.run(coroutine, ...)``, bounded by a timeout (the configured deadline, else
``op_timeout_s``) and, for reads and writes, by the call's cancel token. The coroutines move
``bytes``, never caller memory: the transport copies between ``bytes`` and the caller's
segments in its own thread, under ``cancel.guard()``. That makes the transport
``cancellable``: at the deadline the resilience layer cancels the token, the coroutine is
cancelled on the loop, the waiting thread returns at once, and no byte of caller memory is
touched afterwards (redis-py drops a connection whose command was cancelled mid-reply).

Objects are Redis strings ``key_prefix + name``: ``SET NX`` is create-if-absent and atomic,
``MGET`` reads a batch in one round trip, ``STRLEN`` gives sizes, ``SCAN`` + ``UNLINK``
clears a prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

import redis.asyncio
import redis.exceptions

from hicache_sdk import (
    BackendConfig,
    Capabilities,
    ConfigError,
    PagedStorage,
    Segments,
    Transport,
    TransportError,
    secret_field,
)
from hicache_sdk.config import setting
from hicache_sdk.kit import CancelToken, EventLoopThread, first_occurrences, memoryviews, total_bytes

__all__ = ["AsyncRedisConfig", "AsyncRedisStorage", "AsyncRedisTransport"]

_SCHEMES = ("redis", "rediss", "unix")
#: How long ``clear()`` may take in all (it walks the whole prefix).
_CLEAR_S = 60.0


@dataclass(frozen=True, kw_only=True)
class AsyncRedisConfig(BackendConfig):
    """Settings of ``aredis`` (environment prefix ``HICACHE_AREDIS_``).

    * ``url`` ["redis://127.0.0.1:6379/0"]: ``redis://``, ``rediss://`` or ``unix://``.
    * ``password`` [None, secret]: overrides a password in the URL.
    * ``key_prefix`` ["hicache:"]: prepended to every object name.
    * ``op_timeout_s`` [5.0, > 0]: the bound of one call when no deadline is configured, and
      the client's own connect and socket timeouts.
    * ``max_connections`` [64, 1..1024]: the client's connection pool.
    """

    env_prefix: ClassVar[str] = "AREDIS"

    url: str = "redis://127.0.0.1:6379/0"
    password: str | None = secret_field(None)
    key_prefix: str = "hicache:"
    op_timeout_s: float = setting(5.0, gt=0, le=600, unit="seconds")
    max_connections: int = setting(64, ge=1, le=1024)


class AsyncRedisTransport(Transport):
    """Objects as Redis strings, through ``redis.asyncio`` on an event loop thread."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        persistent=True, shared_across_processes=True, delete=True, health=True
    )
    # reads and writes accept cancel= and touch caller memory only under cancel.guard()
    cancellable: ClassVar[bool] = True
    # the client library's I/O failures: a miss counted under its reason, not a bug
    io_errors: ClassVar[tuple[type[BaseException], ...]] = (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.ResponseError,
    )

    def __init__(self, config: AsyncRedisConfig) -> None:
        if urlsplit(config.url).scheme not in _SCHEMES:  # misconfiguration: raise, naming the key
            raise ConfigError(f"url: the scheme must be one of {', '.join(_SCHEMES)}")
        self.prefix = config.key_prefix
        op = config.op_timeout_s
        # each call's bound: the configured deadline when there is one (the resilience layer
        # gives up then), else op_timeout_s
        self._exists_s = min(op, config.exists_timeout_s) if config.exists_timeout_s > 0 else op
        self._transfer_s = min(op, config.transfer_timeout_s) if config.transfer_timeout_s > 0 else op
        self._loop = EventLoopThread(timeout_s=op, name="aredis")
        kw: dict[str, Any] = {
            "socket_timeout": op,
            "socket_connect_timeout": op,
            "max_connections": config.max_connections,
        }
        if config.password is not None:
            kw["password"] = config.password

        async def make() -> redis.asyncio.Redis:  # built on the loop it will run on
            return redis.asyncio.Redis.from_url(config.url, **kw)  # does not connect

        try:
            self._client = self._loop.run(make())
        except ValueError as e:
            self._loop.close()
            raise ConfigError(f"url: {e}") from None

    # -- names -------------------------------------------------------------------------------
    def _names(self, keys: Sequence[str]) -> list[str]:
        return [self.prefix + k for k in keys]

    # -- the contract ------------------------------------------------------------------------
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        if not keys:
            return []
        return self._loop.run(self._exists(self._names(keys)), timeout_s=self._exists_s)

    async def _exists(self, names: list[str]) -> list[int | None]:
        pipe = self._client.pipeline(transaction=False)
        for n in names:
            pipe.exists(n)
            pipe.strlen(n)
        got = await pipe.execute()
        return [int(got[2 * i + 1]) if got[2 * i] else None for i in range(len(names))]

    def read(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelToken | None = None
    ) -> list[bool]:
        if not keys:
            return []
        token = cancel if cancel is not None else CancelToken()
        values = self._loop.run(self._client.mget(self._names(keys)), timeout_s=self._transfer_s, cancel=token)
        out = []
        for value, segs in zip(values, buffers):
            if not isinstance(value, bytes) or len(value) != total_bytes(segs):
                out.append(False)  # missing, cut short or foreign: never a hit
                continue
            src, offset = memoryview(value), 0
            with token.guard():  # the only touch of caller memory: copies that cannot block
                for view in memoryviews(segs):
                    view[:] = src[offset : offset + len(view)]
                    offset += len(view)
            out.append(True)
        return out

    def write(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelToken | None = None
    ) -> list[bool]:
        if not keys:
            return []
        token = cancel if cancel is not None else CancelToken()
        dup = first_occurrences(keys)  # a name given twice is written once, from its first copy
        keep = range(len(keys)) if dup is None else dup[0]
        payloads = []
        for i in keep:
            with token.guard():  # copy the caller's bytes out before any I/O
                payloads.append(b"".join(memoryviews(buffers[i])))
        names = self._names([keys[i] for i in keep])
        done = self._loop.run(self._write(names, payloads), timeout_s=self._transfer_s, cancel=token)
        return done if dup is None else [done[j] for j in dup[1]]

    async def _write(self, names: list[str], payloads: list[bytes]) -> list[bool]:
        pipe = self._client.pipeline(transaction=False)
        for n, data in zip(names, payloads):
            pipe.set(n, data, nx=True)  # create-if-absent; Redis makes it atomic
        got = await pipe.execute(raise_on_error=False)
        out = []
        for r in got:
            if isinstance(r, Exception):  # one command failed (OOM, ...): that object misses
                self.count_failure("write_refused")
                out.append(False)
            else:
                out.append(True)  # OK: written; None: already there, left untouched
        return out

    def delete(self, keys: Sequence[str]) -> None:
        if keys:
            self._quietly(self._client.unlink(*self._names(keys)), self._transfer_s)

    def clear(self, prefix: str) -> None:
        self._quietly(self._clear(self.prefix + prefix), _CLEAR_S)

    async def _clear(self, prefix: str) -> None:
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"
        batch: list[bytes] = []
        async for name in self._client.scan_iter(match=pattern, count=1000):
            batch.append(name)
            if len(batch) >= 1000:
                await self._client.unlink(*batch)
                batch = []
        if batch:
            await self._client.unlink(*batch)

    def _quietly(self, coro: Any, timeout_s: float) -> None:
        """``delete`` and ``clear`` swallow I/O errors (counted), as the contract says."""
        try:
            self._loop.run(coro, timeout_s=timeout_s)
        except TransportError as e:  # the loop's timeout, or closed
            self.count_failure(e.reason)
        except redis.exceptions.TimeoutError:
            self.count_failure("timeout")
        except (OSError, redis.exceptions.ConnectionError, redis.exceptions.ResponseError):
            self.count_failure("connection")

    def health(self) -> bool:
        try:
            return bool(self._loop.run(self._client.ping(), timeout_s=self._exists_s))
        except Exception:
            return False

    def close(self) -> None:
        # in-flight calls return at once; the client's connections are closed on the loop
        self._loop.close(cleanup=self._client.aclose)


class AsyncRedisStorage(PagedStorage):
    """The ``aredis`` backend: ``PagedStorage`` builds ``AsyncRedisTransport(config)``."""

    config_cls = AsyncRedisConfig
    transport_cls = AsyncRedisTransport
    backend_name = "aredis"
