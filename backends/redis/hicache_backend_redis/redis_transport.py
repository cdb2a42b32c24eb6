"""``RedisTransport``: pages as Redis string values, one value per object.

* ``exists``: one pipelined ``STRLEN`` per key, one round trip (``0`` means absent: no
  stored object is empty).
* ``read``: streamed ``MGET`` commands of at most 256 KiB of values each (see
  :mod:`.mget`): the first flush is the one round trip, the server never holds more than
  about 512 KiB of replies per connection. Every bulk value is received straight into the caller's
  segments (see :mod:`.resp`). A value of another size than its buffers is a miss, never a
  partial page.
* ``write``: one create-if-absent write per object, the value sent from the caller's memory:
  ``SET key value NX [PX ttl]`` all pipelined, or, for values of at least 32 KiB, at most
  ``write_window`` (default 1) in flight per connection as ``SETNX key value`` (value last;
  ``SET ... NX PX`` with a TTL). Redis 7 reads "as much as possible" into the fresh query
  buffer left after a big value, so a pipelined next value lands at an offset and is moved
  (``memmove``) before it can become the stored value without a copy: measured here, the
  server spent 19 % of its time there and about 1.3x the CPU per byte of one-at-a-time writes.
  ``SET`` / ``SETNX`` are atomic, so a reader sees the whole page or nothing; an existing
  key is left untouched and counts as success (the first writer wins).
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
  :class:`TransportError` for the whole batch (reason ``"connection"`` / ``"timeout"``);
  the adapter turns it into misses. The connection is discarded, never reused.
* An error reply for one command (``OOM``, ``NOPERM``) fails that command's keys only.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import threading
from bisect import bisect_left
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from itertools import accumulate, pairwise
from operator import itemgetter
from typing import Any, ClassVar, TypeVar

from hicache_sdk import Capabilities, ConfigError, Segments, Transport, TransportError
from hicache_sdk.kit.batches import first_occurrences

from .config import RedisConfig, parse_endpoint, redact_url
from .frames import set_nx_frame
from .mget import ONE_AT_A_TIME, PIPELINED, chunk_keys, stream_mget
from .pool import AuthError, Pool
from .resp import CancelGuard, Connection, ProtocolError, ReplyError, command, views_of

__all__ = ["RedisTransport", "run_together"]

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

    def __init__(self, config: RedisConfig, *, probe: bool = True) -> None:
        self.config = config
        self.endpoint = parse_endpoint(config)
        self._prefix = config.key_prefix.encode()
        try:
            self._pool = Pool(self.endpoint, config)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"tls_ca_file / tls_cert_file: cannot load ({type(e).__name__})") from None
        self._ttl_ms = config.ttl_s * 1000
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        if probe:
            self._probe()

    # -- construction-time checks --------------------------------------------------------
    def _probe(self, pool: Pool | None = None, cluster: bool = False) -> None:
        """Fail loudly on misconfiguration the server reveals (wrong credentials, an
        untrusted certificate, a user without rights on the prefix, or on ``CLUSTER SLOTS``
        when ``cluster``); an unreachable server is not an error (the breaker starts open).
        ``pool``: the node to ask (default: this transport's). On a cluster node a
        ``MOVED`` / ``ASK`` answer passes: Redis checks ACL rights before redirecting."""
        where = redact_url(self.config.url)
        probes = [("read", command("STRLEN", self._prefix + b"__hicache_probe__"))]
        if cluster:
            probes.append(("CLUSTER SLOTS", command("CLUSTER", "SLOTS")))
        try:
            with (pool or self._pool).connection() as c:
                c.send([cmd for _, cmd in probes], counted=False)
                for what, _ in probes:
                    try:
                        c.reply()
                    except ReplyError as e:
                        if not (what == "read" and str(e).startswith(("MOVED ", "ASK "))):
                            raise ReplyError(what, str(e)) from None
        except AuthError as e:
            key = e.key or ("username / password" if self.endpoint.username else "password")
            raise ConfigError(f"{key}: the server at {where} refused them ({e})") from None
        except ssl.SSLCertVerificationError:
            raise ConfigError(f"tls_ca_file: the server certificate at {where} is not trusted") from None
        except ReplyError as e:
            what, msg = e.args if len(e.args) == 2 else ("read", str(e))
            if msg.startswith("NOAUTH"):
                raise ConfigError(
                    f"password: the server at {where} requires one and none was given"
                ) from None
            if msg.startswith("NOPERM") and what == "read":
                raise ConfigError(
                    f"username: this ACL user may not read keys under key_prefix {self.config.key_prefix!r} ({msg})"
                ) from None
            if msg.startswith("NOPERM"):
                raise ConfigError(f"username: this ACL user may not run {what} ({msg})") from None
            raise ConfigError(f"url: the server refused a {what} ({msg})") from None
        except (OSError, ProtocolError) as e:
            log.info("redis at %s unreachable at construction (%s)", where, type(e).__name__)

    # -- plumbing ------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[Connection], T]) -> T:
        return self._call_many(what, 1, lambda cs: fn(cs[0]))

    def _call_many(self, what: str, n: int, fn: Callable[[list[Connection]], T]) -> T:
        """Run ``fn`` on 1 to ``n`` lent connections; map failures to :class:`TransportError`."""
        try:
            with self._pool.connections(n) as cs:
                return fn(cs)
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
        p = self._prefix
        sizes = [sum(map(_nbytes, segs)) for segs in buffers]
        out = [False] * len(keys)
        # Big values go write_window at a time per connection (see RedisConfig.write_window).
        window = self.config.write_window if max(sizes) >= _BIG_VALUE else 0

        def one(i: int) -> list[bytes | memoryview]:
            head, tail = set_nx_frame(p + keys[i].encode(), sizes[i], self._ttl_ms, window > 0)
            return [head, *views_of(buffers[i]), tail]

        def answer(c: Connection, i: int) -> None:
            try:
                c.reply()  # OK / :1, or nil / :0 when the key already existed (NX)
                out[i] = True
            except ReplyError as e:
                log.debug("redis SET refused: %s", e)
                if str(e).startswith("READONLY"):  # a failover demoted this server
                    c.broken = True
                    self._pool.drop_idle()

        def windowed(lanes: list[tuple[Connection, Sequence[int]]], first: bool) -> None:
            # Each lane (a connection and its values, in order) keeps `window` values in
            # flight: its first window in one flush, then the next value as each reply
            # arrives. Lane 0's flushes are round trips of the batch (when `first`).
            for j, (c, idx) in enumerate(lanes):
                c.send([x for i in idx[:window] for x in one(i)], counted=first and j == 0, cancel=cancel)
            for n in range(max(len(idx) for _, idx in lanes)):  # the n-th reply of each lane
                for j, (c, idx) in enumerate(lanes):
                    if n < len(idx):
                        answer(c, idx[n])
                        if n + window < len(idx):
                            c.send(one(idx[n + window]), counted=first and j == 0, cancel=cancel)

        def part(c: Connection, idx: list[int], first: bool) -> None:
            if window:
                windowed([(c, idx)], first)
                return
            c.send([x for i in idx for x in one(i)], counted=first, cancel=cancel)
            for i in idx:
                answer(c, i)

        def run(cs: list[Connection]) -> list[bool]:
            self._concurrently(cs, sizes, part, cancel)
            return out

        def fan_out(cs: list[Connection]) -> list[bool]:
            # value i on connection i % k, every connection `window` values in flight
            with contextlib.ExitStack() as watching:
                for c in cs:
                    watching.enter_context(c.watch(cancel))
                windowed([(c, range(j, len(keys), len(cs))) for j, c in enumerate(cs)], True)
            return out

        parts = self._parts(sizes)
        if window and parts == 1 and len(keys) > 1 and self.config.parallel_connections > 1:
            # A batch too small to split over threads still goes over several connections,
            # driven from this thread: the server takes the next value from another
            # connection while one reply is on its way, and no thread is woken.
            return self._call_many("write", min(self.config.parallel_connections, len(keys)), fan_out)
        return self._call_many("write", parts, run)

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
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"RedisTransport(url={redact_url(self.config.url)!r}, key_prefix={self.config.key_prefix!r})"
