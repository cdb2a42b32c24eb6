"""``RedisTransport``: pages as Redis string values, one value per object.

redis-py carries everything but the pages: the checks at construction, ``exists`` (one
write of ``STRLEN`` commands, :func:`.client.run_commands`), ``delete``, ``clear`` (``SCAN`` + ``UNLINK``), ``health``
(``PING``), and with ``redis+sentinel://`` the master's address (asked of the sentinels for
every new data connection, so a failover is followed). The pages move over data connections
of our own to that server (:mod:`.pool`):

* ``read``: streamed ``MGET`` commands of at most 256 KiB of values each (see
  :mod:`.mget`): the first flush is the one round trip, the server never holds more than
  about 512 KiB of replies per connection. Every bulk value is received straight into the
  caller's segments (see :mod:`.resp`). A value of another size than its buffers is a miss,
  never a partial page.
* ``write``: one create-if-absent write per object, the value sent from the caller's memory:
  ``SET key value NX [PX ttl]`` all pipelined, or, for values of at least 32 KiB, at most
  ``write_window`` (default 1) in flight per connection as ``SETNX key value`` (value last;
  ``SET ... NX PX`` with a TTL). Redis 7 reads "as much as possible" into the fresh query
  buffer left after a big value, so a pipelined next value lands at an offset and is moved
  (``memmove``) before it can become the stored value without a copy; one value at a time
  per connection avoids that copy. ``SET`` / ``SETNX`` are atomic, so a reader sees the
  whole page or nothing; an existing key is left untouched and counts as success (the first
  writer wins).
* Large batches (``read`` / ``write`` of at least 4 MiB) are split into up to
  ``parallel_connections`` contiguous parts, each on its own pooled connection, run
  concurrently (the caller's thread runs the first): the server and the kernel copy for
  several sockets at once. A part is one round trip on its connection, concurrent with
  the others, so :attr:`round_trips` counts the batch once. Extra connections are only
  taken when free at once, so concurrent batches never wait for each other's. A smaller
  batch of big values (``write_window`` > 0) goes over up to ``parallel_connections``
  connections too, driven from the caller's thread with no other thread woken: value ``i``
  on connection ``i % k``, each connection ``write_window`` values in flight, every first
  send in one round trip. A batch with a key more than once is written once per key, from
  the first copy (over several connections a later copy could otherwise land first).
* I/O failure (refused, reset, timeout, a server killed mid-batch) raises
  :class:`TransportError` for the whole batch (reason ``"connection"`` / ``"timeout"`` ...,
  the message naming the address); the adapter turns it into misses. The connection is
  discarded, never reused.
* An error reply for one command (``OOM``, ``NOPERM``) fails that command's keys only.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from bisect import bisect_left
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from itertools import accumulate, pairwise
from operator import itemgetter
from typing import Any, ClassVar, TypeVar

import redis

from hicache_sdk import Capabilities, Segments, Transport, TransportError
from hicache_sdk.kit.batches import first_occurrences
from hicache_sdk.transport import Range

from .checks import check_data_connection, check_rights, check_sentinels
from .client import IO_ERRORS, closing, redis_kwargs, run_commands, sentinel, transport_error
from .config import Endpoint, RedisConfig, parse_endpoint, redact_url, tls_context
from .mget import ONE_AT_A_TIME, PIPELINED, chunk_keys, stream_mget
from .pool import Address, Pool
from .resp import CancelGuard, Connection, ReplyError
from .writes import frames, write_lanes, write_part

__all__ = ["RedisTransport", "clear_matching", "glob_escape", "run_together", "same"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_GLOB = str.maketrans({c: "\\" + c for c in "*?[]\\"})
#: A batch is split into parts of at least this many bytes.
_PART_MIN = 2 << 20
_nbytes = itemgetter(1)  # of a segment
#: Values this large take Redis's big-argument path (``PROTO_MBULK_BIG_ARG``): writes of
#: them go ``write_window`` at a time.
_BIG_VALUE = 32 << 10


def run_together(executor: ThreadPoolExecutor | None, calls: Sequence[Callable[[], None]]) -> None:
    """Run ``calls[0]`` on this thread and the rest on ``executor``, concurrently; wait for
    every call before returning or raising (a connection is never released while a part
    still uses it), then raise the first failure."""
    futures: list[Future[None]] = [executor.submit(c) for c in calls[1:]] if executor is not None else []
    err: BaseException | None = None
    try:
        calls[0]()
    except BaseException as e:
        err = e
    for f in futures:
        try:
            f.result()
        except BaseException as e:
            err = err or e
    if err is not None:
        raise err


def split_parts(sizes: Sequence[int], k: int) -> list[list[int]]:
    """The indices of ``sizes`` cut into at most ``k`` contiguous, non-empty parts of about
    equal bytes: index ``i`` goes to part ``acc * k // total`` (``acc``: the bytes before it;
    the last part at most). Found by bisection over the running sums, not a loop per index."""
    before = list(accumulate(sizes, initial=0))
    total = max(before.pop(), 1)
    starts = [0, *(bisect_left(before, -(-j * total // k)) for j in range(1, k)), len(sizes)]
    return [list(range(a, b)) for a, b in pairwise(starts) if b > a]


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
        ep = self._settings(config)
        self._sentinel: Any = None
        resolve: Callable[[], Address]
        if ep.sentinels:
            self._sentinel = sentinel(ep, config)
            self._client: Any = self._sentinel.master_for(ep.service)
            resolve = partial(self._sentinel.discover_master, ep.service)
        else:
            self._client = redis.Redis(**redis_kwargs(ep, config))
            fixed: Address = ep.unix_path or (ep.host, ep.port)
            resolve = partial(same, fixed)
        self._pool = Pool(resolve, ep, config, self._ctx)
        if probe:
            try:
                self._check()
            except BaseException:
                self.close()
                raise

    def _settings(self, config: RedisConfig) -> Endpoint:
        """What every redis transport keeps of its config (validated; never connects)."""
        self.config = config
        self.endpoint = ep = parse_endpoint(config)
        self._prefix = config.key_prefix.encode()
        self._ctx = tls_context(config) if ep.tls else None
        self._ttl_ms = config.ttl_s * 1000
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        return ep

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

    # -- plumbing ------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[Connection], T]) -> T:
        return self._call_many(what, 1, lambda cs: fn(cs[0]))

    def _call_many(self, what: str, n: int, fn: Callable[[list[Connection]], T]) -> T:
        """Run ``fn`` on 1 to ``n`` lent data connections; map failures to
        :class:`TransportError` (the address in its message)."""
        try:
            with self._pool.connections(n) as cs:
                return fn(cs)
        except Exception as e:
            raise transport_error(e, what, self._pool.where) from None

    def _redis(self, what: str, fn: Callable[[Any], T]) -> T:
        """Run ``fn`` on the redis-py client; map failures to :class:`TransportError`."""
        try:
            return fn(self._client)
        except Exception as e:
            raise transport_error(e, what, self._pool.where or self.endpoint.address) from None

    def _parts(self, sizes: list[int]) -> int:
        """How many connections a batch of values of ``sizes`` bytes is worth."""
        return max(1, min(self.config.parallel_connections, len(sizes), sum(sizes) // _PART_MIN))

    def _concurrently(
        self,
        conns: list[Connection],
        sizes: list[int],
        part: Callable[[Connection, list[int], bool], None],
        cancel: CancelGuard | None = None,
    ) -> None:
        """Split the indices of ``sizes`` into ``len(conns)`` contiguous parts of about equal
        bytes and run ``part(conn, indices, first)`` on each, concurrently (the first on this
        thread). Waits for every part before returning or raising (a connection is never
        released while a part still uses it); raises the first failure. Each connection's
        waits look at ``cancel`` while its part runs (:attr:`Connection.cancel`)."""

        def guarded(c: Connection, idx: list[int], first: bool) -> None:
            with c.watch(cancel):
                part(c, idx, first)

        groups = split_parts(sizes, len(conns))
        executor = None
        if len(groups) > 1:
            with self._executor_lock:
                if self._executor is None:
                    # parts hold a pooled connection each: pool_size workers never queue one
                    self._executor = ThreadPoolExecutor(
                        self.config.pool_size, thread_name_prefix="hicache-redis"
                    )
            executor = self._executor
        run_together(
            executor, [partial(guarded, c, g, i == 0) for i, (c, g) in enumerate(zip(conns, groups))]
        )

    @property
    def round_trips(self) -> int:
        """Request flushes that waited for replies (one per ``exists`` / ``read`` / ``write`` batch)."""
        return self._pool.round_trips

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
        from .ranges import read_ranges_redis

        return read_ranges_redis(self, key, ranges)

    def read(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None = None
    ) -> list[bool]:
        if not keys:
            return []
        names = [self._prefix + k.encode() for k in keys]
        sizes = [sum(map(_nbytes, segs)) for segs in buffers]
        out = [False] * len(keys)

        def run(cs: list[Connection]) -> list[bool]:
            policy = PIPELINED if len(cs) == 1 else ONE_AT_A_TIME

            def part(c: Connection, idx: list[int], first: bool) -> None:
                chunks = chunk_keys([idx], sizes, self.config.max_command_bytes)
                stream_mget(c, names, sizes, buffers, chunks, out, cancel, counted=first, policy=policy)

            self._concurrently(cs, sizes, part, cancel)
            return out

        return self._call_many("read", self._parts(sizes), run)

    def write(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None = None
    ) -> list[bool]:
        if not keys:
            return []
        dup = first_occurrences(keys)
        if dup is None:
            return self._write_distinct(keys, buffers, cancel)
        # over several connections a later copy could land first: write each key once
        keep, owner = dup
        got = self._write_distinct([keys[i] for i in keep], [buffers[i] for i in keep], cancel)
        return [got[j] for j in owner]

    def _write_distinct(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None
    ) -> list[bool]:
        sizes = [sum(map(_nbytes, segs)) for segs in buffers]
        out = [False] * len(keys)
        # Big values go write_window at a time per connection (see RedisConfig.write_window).
        window = self.config.write_window if max(sizes) >= _BIG_VALUE else 0
        heads, tail = frames([self._prefix + k.encode() for k in keys], sizes, self._ttl_ms, window)

        def refused(c: Connection, e: ReplyError) -> None:
            log.debug("redis SET refused: %s", e)
            if str(e).startswith("READONLY"):  # a failover demoted this server
                c.broken = True
                self._pool.drop_idle()

        def part(c: Connection, idx: list[int], first: bool) -> None:
            write_part(c, idx, heads, tail, buffers, window, out, cancel, counted=first, refused=refused)

        def run(cs: list[Connection]) -> list[bool]:
            self._concurrently(cs, sizes, part, cancel)
            return out

        def fan_out(cs: list[Connection]) -> list[bool]:
            # value i on connection i % k, every connection `window` values in flight
            with contextlib.ExitStack() as watching:
                for c in cs:
                    watching.enter_context(c.watch(cancel))
                lanes = [(c, range(j, len(keys), len(cs))) for j, c in enumerate(cs)]
                write_lanes(lanes, heads, tail, buffers, window, out, cancel, counted=True, refused=refused)
            return out

        parts = self._parts(sizes)
        if window and parts == 1 and len(keys) > 1 and self.config.parallel_connections > 1:
            # A batch too small to split over threads still goes over several connections,
            # driven from this thread: the server takes the next value from another
            # connection while one reply is on its way, and no thread is woken.
            return self._call_many("write", min(self.config.parallel_connections, len(keys)), fan_out)
        return self._call_many("write", parts, run)

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
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"RedisTransport(url={redact_url(self.config.url)!r}, key_prefix={self.config.key_prefix!r})"


def same(address: Address) -> Address:
    """``address`` (a ``resolve`` for a data pool whose server does not move)."""
    return address


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
