"""``RedisTransport``: pages as Redis string values, one value per object.

redis-py carries everything but the pages: the checks at construction, ``exists`` (one
write of ``STRLEN`` commands, :func:`.client.run_commands`), ``delete``, ``clear`` (``SCAN`` + ``UNLINK``), ``health``
(``PING``), and with ``redis+sentinel://`` the master's address (asked of the sentinels for
every new data connection, so a failover is followed). The pages move over data connections
of our own to that server (:mod:`.pool`):

* ``read`` / ``write``: the payload of :class:`.node_io.NodeIO` (the same as each master of
  a cluster gets): streamed ``MGET`` commands of at most 256 KiB of values each (see
  :mod:`.mget`), every bulk value received straight into the caller's segments (a value of
  another size than its buffers is a miss, never a partial page); one create-if-absent
  write per object, the value sent from the caller's memory (see :mod:`.writes`):
  ``SET key value NX [PX ttl]`` all pipelined, or, for values of at least 32 KiB, at most
  ``write_window`` (default 1) in flight per connection as ``SETNX key value`` (value
  last). Redis 7 reads "as much as possible" into the fresh query buffer left after a big
  value, so a pipelined next value lands at an offset and is moved (``memmove``) before it
  can become the stored value without a copy; one value at a time per connection avoids
  that copy. ``SET`` / ``SETNX`` are atomic, so a reader sees the whole page or nothing; an
  existing key is left untouched and counts as success (the first writer wins). Large
  batches go over up to ``parallel_connections`` connections at once. A batch with a key
  more than once is written once per key, from the first copy (over several connections a
  later copy could otherwise land first). Round trips are counted in :attr:`metrics`.
* I/O failure (refused, reset, timeout, a server killed mid-batch) raises
  :class:`TransportError` for the whole batch (reason ``"connection"`` / ``"timeout"`` ...,
  the message naming the address); the adapter turns it into misses. The connection is
  discarded, never reused.
* An error reply for one command (``OOM``, ``NOPERM``) fails that command's keys only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from operator import itemgetter
from typing import Any, ClassVar, TypeVar

import redis

from hicache_sdk import Capabilities, ConfigError, Segments, Transport, TransportError
from hicache_sdk.kit.batches import first_occurrences
from hicache_sdk.metrics import Metrics
from hicache_sdk.transport import Range

from .checks import check_data_connection, check_rights, check_sentinels
from .client import IO_ERRORS, closing, redis_kwargs, run_commands, sentinel, transport_error
from .config import RedisConfig, parse_endpoint, redact_url, tls_context
from .frames import CancelGuard
from .node_io import LazyExecutor, NodeIO
from .pool import Address, Pool
from .ranges import read_ranges_redis

__all__ = ["RedisTransport", "clear_matching", "glob_escape", "Settings", "write_once"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_GLOB = str.maketrans({c: "\\" + c for c in "*?[]\\"})
_nbytes = itemgetter(1)  # of a segment


class Settings:
    """What every redis transport keeps of its config (validated; never connects)."""

    def __init__(self, config: RedisConfig) -> None:
        self.config = config
        self.endpoint = parse_endpoint(config)
        self.prefix = config.key_prefix.encode()
        self.ctx = tls_context(config) if self.endpoint.tls else None
        self.ttl_ms = config.ttl_s * 1000


def write_once(
    keys: Sequence[str],
    buffers: Sequence[Segments],
    write: Callable[[Sequence[str], Sequence[Segments]], list[Any]],
) -> list[Any]:
    """``write(keys, buffers)`` with each key once, from its first copy (over several
    connections a later copy could otherwise land first); the results in ``keys``' order."""
    dup = first_occurrences(keys)
    if dup is None:
        return write(keys, buffers)
    keep, owner = dup
    got = write([keys[i] for i in keep], [buffers[i] for i in keep])
    return [got[j] for j in owner]


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

    #: redis-py's I/O failures (a batch raising one is a miss counted under its reason).
    io_errors: ClassVar[tuple[type[BaseException], ...]] = IO_ERRORS

    def __init__(self, config: RedisConfig, *, probe: bool = True) -> None:
        if config.cluster or config.startup_nodes:
            raise ConfigError(
                "cluster / startup_nodes: RedisTransport talks to one server; a cluster is "
                "RedisClusterTransport (the redis backend picks it when cluster is true)"
            )
        own = Settings(config)
        self.config, self.endpoint, self._prefix = config, own.endpoint, own.prefix
        self._ttl_ms = own.ttl_ms
        ep = own.endpoint
        #: Counters of the payload path (``"round_trips"``: request flushes that waited for
        #: replies, one per ``read`` / ``write`` batch whose parts run concurrently).
        self.metrics = Metrics()
        self._sentinel: Any = None
        resolve: Callable[[], Address]
        if ep.sentinels:
            self._sentinel = sentinel(ep, config)
            self._client: Any = self._sentinel.master_for(ep.service)
            resolve = partial(self._sentinel.discover_master, ep.service)
        else:
            self._client = redis.Redis(**redis_kwargs(ep, config))
            fixed: Address = ep.unix_path or (ep.host, ep.port)
            resolve = lambda: fixed  # noqa: E731 - a server that does not move
        self._executor = LazyExecutor(config.pool_size, "hicache-redis")  # a part holds a connection
        self._pool = Pool(resolve, ep, config, own.ctx)
        self._io = NodeIO(self._pool, config, self.metrics, self._executor)
        if probe:
            try:
                self._check()
            except BaseException:
                self.close()
                raise

    def _check(self) -> None:
        """The construction checks (:mod:`.checks`), each bounded by ``connect_timeout_s``."""
        ep, cfg = self.endpoint, self.config
        if self._sentinel is not None:
            quick = sentinel(ep, cfg, timeout=cfg.connect_timeout_s)
            try:
                check_sentinels(quick, ep, cfg)
                if check_data_connection(self._pool, cfg):
                    node = quick.master_for(ep.service)  # type: ignore[no-untyped-call]
                    check_rights(ep, cfg, self._prefix, node=node)
                    closing(node)
            finally:
                for c in quick.sentinels:
                    closing(c)
        elif check_data_connection(self._pool, cfg):
            check_rights(ep, cfg, self._prefix)

    def _redis(self, what: str, fn: Callable[[Any], T]) -> T:
        """Run ``fn`` on the redis-py client; map failures to :class:`TransportError`."""
        try:
            return fn(self._client)
        except Exception as e:
            raise transport_error(e, what, self._pool.where or self.endpoint.address) from None

    # -- Transport -----------------------------------------------------------------------
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        """``STRLEN`` of every key in one write and one round trip (redis-py); ``0`` means
        absent (no stored object is empty). An error reply fails the batch."""
        if not keys:
            return []
        p = self._prefix

        def run(r: Any) -> list[int | None]:
            got = run_commands(r, [("STRLEN", p + k.encode()) for k in keys])
            for x in got:
                if isinstance(x, Exception):
                    raise x
            return [n or None for n in got]

        return self._redis("exists", run)

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> bool:
        """``STRLEN`` and a ``GETRANGE`` per range in one round trip (:mod:`.ranges`)."""
        return read_ranges_redis(
            lambda fn: self._redis("read_ranges", fn), self._prefix + key.encode(), self.count_failure, ranges
        )

    def read(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None = None
    ) -> list[bool]:
        if not keys:
            return []
        names = [self._prefix + k.encode() for k in keys]
        sizes = [sum(map(_nbytes, segs)) for segs in buffers]
        out = [False] * len(keys)
        self._io.read(range(len(keys)), names, sizes, buffers, out, cancel)
        return out

    def write(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None = None
    ) -> list[bool]:
        if not keys:
            return []
        return write_once(keys, buffers, partial(self._write_distinct, cancel=cancel))

    def _write_distinct(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None
    ) -> list[bool]:
        names = [self._prefix + k.encode() for k in keys]
        sizes = [sum(map(_nbytes, segs)) for segs in buffers]
        out = [False] * len(keys)
        self._io.write(range(len(keys)), names, sizes, buffers, self._ttl_ms, out, cancel)
        return out

    def delete(self, keys: Sequence[str]) -> None:
        """``UNLINK`` (redis-py), 1000 keys per command; errors are logged and swallowed."""
        if not keys:
            return
        names = [self._prefix + k.encode() for k in keys]

        def run(r: Any) -> None:
            pipe = r.pipeline(transaction=False)
            for i in range(0, len(names), 1000):
                pipe.unlink(*names[i : i + 1000])
            pipe.execute()

        try:
            self._redis("delete", run)
        except TransportError as e:
            log.debug("redis delete failed: %s", e)

    def clear(self, prefix: str) -> None:
        """Remove every key under ``key_prefix + prefix`` (``SCAN MATCH`` with the glob
        characters of both escaped, then ``UNLINK``). ``key_prefix`` ends with ``:`` (or is
        empty), so no other prefix's keys match. Raises :class:`TransportError` when the
        server fails (a later clear finishes the job)."""
        self._redis("clear", partial(clear_matching, pattern=glob_escape(self.config.key_prefix + prefix)))

    def health(self) -> bool:
        """``PING`` (redis-py)."""
        try:
            return bool(self._redis("health", lambda r: r.ping()))
        except TransportError:
            return False

    def close(self) -> None:
        self._pool.close()
        closing(self._client)
        if self._sentinel is not None:
            for c in self._sentinel.sentinels:
                closing(c)
        self._executor.shutdown()

    def __repr__(self) -> str:
        return f"RedisTransport(url={redact_url(self.config.url)!r}, key_prefix={self.config.key_prefix!r})"


def glob_escape(text: str) -> bytes:
    """``text`` as a ``SCAN MATCH`` pattern that matches it literally, ``*`` appended."""
    return text.translate(_GLOB).encode() + b"*"


def clear_matching(r: Any, pattern: bytes, *, per_key: bool = False) -> None:
    """``UNLINK`` every key ``SCAN MATCH pattern`` finds on the server of client ``r``, 1000
    at a time (``per_key``: one ``UNLINK`` per key, pipelined: a cluster node refuses a
    command whose keys are in different slots)."""
    found: list[bytes] = []

    def unlink() -> None:
        if per_key:
            pipe = r.pipeline(transaction=False)
            for name in found:
                pipe.unlink(name)
            pipe.execute()
        else:
            r.unlink(*found)
        found.clear()

    for name in r.scan_iter(match=pattern, count=1000):
        found.append(name)
        if len(found) >= 1000:
            unlink()
    if found:
        unlink()
