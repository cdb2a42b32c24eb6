"""The payload of one Redis server: its data connections, and batches split over them.

:class:`NodeIO` is the one place pages move, for a standalone server, a sentinel's master and
each master of a cluster alike (the cluster transport holds one per master). It owns that
server's :class:`~.pool.Pool` and applies every setting of the payload path:

* ``read``: the read path (:func:`.mget.stream_mget`), keys cut into ``MGET`` commands of at
  most ``max_command_bytes`` (and keys of one group only per command: a cluster's slots);
* ``write``: the write path (:func:`.writes.write_lanes`), ``write_window`` values of at
  least 32 KiB in flight per connection;
* ``parallel_connections`` (``width``: this server's share of them, for a batch that spans
  several): a batch of at least 4 MiB is split into that many contiguous parts of about
  equal bytes, each on its own pooled connection, run concurrently (the
  caller's thread runs the first). Extra connections are only taken when free at once, so
  concurrent batches never wait for each other's. A smaller windowed write of several values
  goes over up to that many connections driven from the caller's thread
  (value ``i`` on connection ``i % k``): the server takes the next value from another
  connection while one reply is on its way, and no thread is woken.

Round trips (request flushes followed by a wait, one per batch where the parts run
concurrently) are counted in ``metrics`` under ``"round_trips"``, worked out from the
batch's plan, never in the loops that move the bytes.
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
from typing import Any

from hicache_sdk import Segments
from hicache_sdk.metrics import Metrics

from .client import transport_error
from .config import RedisConfig
from .frames import CancelGuard, ReplyError, write_frames
from .mget import ONE_AT_A_TIME, PIPELINED, chunk_keys, stream_mget
from .pool import Pool
from .resp import Connection
from .writes import write_lanes

__all__ = ["BIG_VALUE", "LazyExecutor", "NodeIO", "run_together", "split_parts"]

log = logging.getLogger(__name__)
#: A batch is split into parts of at least this many bytes.
PART_MIN = 2 << 20
#: Values this large take Redis's big-argument path (``PROTO_MBULK_BIG_ARG``): writes of
#: them go ``write_window`` at a time.
BIG_VALUE = 32 << 10


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
    """The positions of ``sizes`` cut into at most ``k`` contiguous, non-empty parts of about
    equal bytes: position ``i`` goes to part ``acc * k // total`` (``acc``: the bytes before
    it; the last part at most). Found by bisection over the running sums."""
    before = list(accumulate(sizes, initial=0))
    total = max(before.pop(), 1)
    starts = [0, *(bisect_left(before, -(-j * total // k)) for j in range(1, k)), len(sizes)]
    return [list(range(a, b)) for a, b in pairwise(starts) if b > a]


class LazyExecutor:
    """A thread pool made on first use (most batches never need one); ``shutdown`` ends it."""

    def __init__(self, workers: int, name: str) -> None:
        self._workers = workers
        self._name = name
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def __call__(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix=self._name)
            return self._executor

    def shutdown(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False)


class NodeIO:
    """Reads and writes of pages on one server (see the module docs). ``executor()``: the
    thread pool that runs a batch's extra parts (made on first use by the owner).
    ``refused(connection, error)``: what a value answered with an error reply becomes
    (``False``, or a cluster's redirect marker); a ``READONLY`` answer (a failover demoted
    this server) also drops the pool's idle connections."""

    def __init__(
        self,
        pool: Pool,
        config: RedisConfig,
        metrics: Metrics,
        executor: Callable[[], ThreadPoolExecutor],
        refused: Callable[[ReplyError], Any] = lambda e: False,
    ) -> None:
        self.pool = pool
        self.config = config
        self.metrics = metrics
        self._executor = executor
        self._refused = refused

    def close(self) -> None:
        self.pool.close()

    # -- plumbing ------------------------------------------------------------------------
    def _call(self, what: str, n: int, fn: Callable[[list[Connection]], None]) -> None:
        """Run ``fn`` on 1 to ``n`` lent connections; failures become a
        :class:`~hicache_sdk.TransportError` naming the address."""
        try:
            with self.pool.connections(n) as cs:
                fn(cs)
        except Exception as e:
            raise transport_error(e, what, self.pool.where) from None

    def _parts(self, sizes: Sequence[int], width: int) -> int:
        """How many of ``width`` connections a batch of values of ``sizes`` bytes is worth."""
        return max(1, min(width, len(sizes), sum(sizes) // PART_MIN))

    def _concurrently(
        self,
        conns: list[Connection],
        idx: Sequence[int],
        sizes: Sequence[int],
        part: Callable[[Connection, list[int]], None],
        cancel: CancelGuard | None,
    ) -> list[list[int]]:
        """Split ``idx`` into ``len(conns)`` contiguous parts of about equal bytes and run
        ``part(conn, indices)`` on each, concurrently (the first on this thread), each
        connection watching ``cancel``. Returns the parts."""

        def guarded(c: Connection, group: list[int]) -> None:
            with c.watch(cancel):
                part(c, group)

        groups = [[idx[p] for p in g] for g in split_parts([sizes[i] for i in idx], len(conns))]
        executor = self._executor() if len(groups) > 1 else None
        run_together(executor, [partial(guarded, c, g) for c, g in zip(conns, groups)])
        return groups

    def _refusal(self, c: Connection, e: ReplyError) -> Any:
        log.debug("redis write refused: %s", e)
        if str(e).startswith("READONLY"):  # a failover demoted this server
            c.broken = True
            self.pool.drop_idle()
        return self._refused(e)

    # -- the payload ---------------------------------------------------------------------
    def read(
        self,
        idx: Sequence[int],
        names: Sequence[bytes],
        sizes: Sequence[int],
        buffers: Sequence[Segments],
        out: list[Any],
        cancel: CancelGuard | None,
        groups: Callable[[list[int]], list[list[int]]] | None = None,
        width: int = 0,
    ) -> None:
        """Read the values ``idx`` (indices into ``names``, ``sizes``, ``buffers`` and
        ``out``): ``out[i]`` becomes True for a value received whole, False for a miss, or
        what ``refused`` makes of an error reply. ``groups(indices)``: the indices cut into
        groups that may share a command (default: all of them). ``width``: the most
        connections to use at once (default ``parallel_connections``)."""
        if not idx:
            return
        limit = self.config.max_command_bytes

        def refused(ch: Sequence[int], e: ReplyError) -> None:
            r = self._refused(e)
            for i in ch:
                out[i] = r

        def run(cs: list[Connection]) -> None:
            policy = PIPELINED if len(cs) == 1 else ONE_AT_A_TIME

            def part(c: Connection, mine: list[int]) -> None:
                chunks = chunk_keys(groups(mine) if groups else [mine], sizes, limit)
                stream_mget(c, names, sizes, buffers, chunks, out, cancel, refused=refused, policy=policy)

            self._concurrently(cs, idx, sizes, part, cancel)
            self.metrics.count("round_trips")

        self._call(
            "read", self._parts([sizes[i] for i in idx], width or self.config.parallel_connections), run
        )

    def write(
        self,
        idx: Sequence[int],
        names: Sequence[bytes],
        sizes: Sequence[int],
        buffers: Sequence[Segments],
        ttl_ms: int,
        out: list[Any],
        cancel: CancelGuard | None,
        width: int = 0,
    ) -> None:
        """Create-if-absent writes of the values ``idx`` (each key once: the caller removes
        duplicates, which over several connections could land in any order): ``out[i]``
        becomes True for a value written or already there, or what ``refused`` makes of an
        error reply. ``write_window`` applies when the largest value is at least
        :data:`BIG_VALUE`. ``width``: as for :meth:`read`."""
        if not idx:
            return
        idx = list(idx)
        my_sizes = [sizes[i] for i in idx]
        window = self.config.write_window if max(my_sizes) >= BIG_VALUE else 0
        mine, tail = write_frames([names[i] for i in idx], my_sizes, ttl_ms, window)
        heads = [b""] * len(names)  # indexed as the batch is
        for i, head in zip(idx, mine):
            heads[i] = head

        def trips(first_lane: int) -> int:
            return 1 + max(0, first_lane - window) if window else 1

        def run(cs: list[Connection]) -> None:
            def part(c: Connection, share: list[int]) -> None:
                write_lanes([(c, share)], heads, tail, buffers, window, out, cancel, refused=self._refusal)

            groups = self._concurrently(cs, idx, sizes, part, cancel)
            self.metrics.count("round_trips", trips(len(groups[0])))

        def fan_out(cs: list[Connection]) -> None:
            # value i on connection i % k, every connection `window` values in flight
            with contextlib.ExitStack() as watching:
                for c in cs:
                    watching.enter_context(c.watch(cancel))
                lanes = [(c, idx[j :: len(cs)]) for j, c in enumerate(cs)]
                write_lanes(lanes, heads, tail, buffers, window, out, cancel, refused=self._refusal)
            self.metrics.count("round_trips", trips(len(lanes[0][1])))

        width = width or self.config.parallel_connections
        parts = self._parts(my_sizes, width)
        wide = min(width, len(idx))
        if window and parts == 1 and wide > 1:
            self._call("write", wide, fan_out)
        else:
            self._call("write", parts, run)
