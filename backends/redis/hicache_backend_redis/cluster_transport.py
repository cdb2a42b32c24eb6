"""``RedisClusterTransport``: the same wire behaviour as :class:`RedisTransport`, spread
over a Redis Cluster's masters.

* Topology is redis-py's ``RedisCluster``: its slot map says which master owns a key
  (``get_node_from_key``; CRC16, hash tags honoured), and redis-py refreshes it when its own
  commands meet ``MOVED``. The client is made at construction when the cluster answers,
  else at the first call that reaches it.
* A batch is split per owning master; the parts run concurrently (one thread per node, the
  caller being one); results come back in key order. ``read`` and ``write`` on each master
  are those of a standalone server (:class:`.node_io.NodeIO`, one per master, over data
  connections of our own): the same read and write paths, ``write_window``,
  ``max_command_bytes``, ``parallel_connections`` shared by the masters a batch spans
  (each at least one: 4 over 3 masters is one connection each, 12 is four each), with one
  difference: an ``MGET`` holds keys of one slot only (Cluster refuses a cross-slot
  ``MGET``). Round trips
  are counted in :attr:`metrics`, one per node and batch. ``exists`` and ``delete`` go
  through each master's redis-py client, one write of commands each
  (:func:`.client.run_commands`).
* A key answered with ``MOVED`` or ``ASK`` (a slot moving or moved) is retried once through
  redis-py's cluster client, which follows the redirect (``ASKING`` included) and, on
  ``MOVED``, refreshes its slot map; the next batch goes to the new owner. The value goes
  through redis-py there (one copy): a migration's rare path, not the hot one.
* A master that fails fails only its keys (misses / ``False``), and the slot map is
  refreshed (at most once a second); the batch raises :class:`TransportError` only when
  every part failed (so the breaker opens when the whole cluster is gone). With
  ``cluster-require-full-coverage no`` the other masters keep serving their slots meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from operator import itemgetter
from typing import Any, ClassVar

import redis
import redis.exceptions as rex
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from hicache_sdk import Capabilities, ConfigError, Segments, Transport, TransportError
from hicache_sdk.kit.segments import memoryviews
from hicache_sdk.metrics import Metrics

from .checks import check_data_connection, check_rights
from .client import IO_ERRORS, closing, redis_kwargs, run_commands, transport_error
from .config import RedisConfig, redact_url
from .frames import CancelGuard, ReplyError
from .node_io import LazyExecutor, NodeIO, run_together
from .pool import Pool, where
from .redis_transport import RedisTransport, Settings, clear_matching, glob_escape, write_once

__all__ = ["RedisClusterTransport"]

log = logging.getLogger(__name__)
_nbytes = itemgetter(1)  # of a segment
Node = tuple[str, int]
#: A key answered with MOVED / ASK: retried through redis-py's cluster client.
_REDIRECT = object()
_REFRESH_EVERY_S = 1.0
_REDIS_MAJOR = int(redis.__version__.split(".")[0])


class RedisClusterTransport(Transport):
    """A :class:`~hicache_sdk.Transport` over a Redis Cluster (see the module docs)."""

    capabilities: ClassVar[Capabilities] = RedisTransport.capabilities
    #: Every part's receives into and sends from caller memory run under the cancel
    #: token's guard, with the connection watching the token.
    cancellable: ClassVar[bool] = True
    io_errors: ClassVar[tuple[type[BaseException], ...]] = IO_ERRORS

    def __init__(self, config: RedisConfig) -> None:
        own = Settings(config)
        self.config, self.endpoint, self._prefix = config, own.endpoint, own.prefix
        self._ctx, self._ttl_ms = own.ctx, own.ttl_ms
        ep = own.endpoint
        #: Counters of the payload path (``"round_trips"``: one per node and batch).
        self.metrics = Metrics()
        if ep.unix_path or ep.db or ep.sentinels:
            raise ConfigError("url: a cluster needs a redis:// or rediss:// url with database 0")
        self._seeds: list[Node] = [(ep.host, ep.port)]
        for s in config.startup_nodes:
            host, _, port = s.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"startup_nodes: expected 'host:port', got {s!r}")
            self._seeds.append((host, int(port)))
        self._lock = threading.Lock()
        self._cluster: RedisCluster | None = None
        self._nodes: dict[Node, NodeIO] = {}
        self._refreshed = 0.0
        self._closed = False
        self._workers = ThreadPoolExecutor(max_workers=16, thread_name_prefix="hicache-redis-cluster")
        #: The extra parts of a node's large batch (``parallel_connections``).
        self._executor = LazyExecutor(max(16, config.pool_size), "hicache-redis-part")
        try:
            if check_data_connection(self._node(self._seeds[0]).pool, config):
                check_rights(ep, config, self._prefix, cluster=True)
                self._cluster = self._new_cluster()
        except rex.NoPermissionError as e:
            self.close()
            raise ConfigError(
                f"username: this ACL user may not run what redis-py's cluster client needs ({e})"
            ) from None
        except (OSError, rex.RedisError, rex.RedisClusterException) as e:
            log.warning("redis cluster at %s: no slot map at construction (%s)", redact_url(config.url), e)
        except BaseException:
            self.close()
            raise

    # -- topology ----------------------------------------------------------------------------
    def _rc(self) -> RedisCluster:
        """redis-py's cluster client, made on first use (:class:`TransportError` while no
        startup node answers)."""
        rc = self._cluster
        if rc is not None:
            return rc
        try:
            rc = self._new_cluster()
        except Exception as e:
            seeds = ", ".join(where(s) for s in self._seeds)
            raise TransportError(f"redis cluster: no slot map from {seeds}: {e}", "connection") from None
        with self._lock:
            if self._cluster is None and not self._closed:
                self._cluster = rc
                return rc
            mine = self._cluster
        closing(rc)
        if mine is None:
            raise TransportError("redis cluster: transport closed", "closed")
        return mine

    def _new_cluster(self) -> RedisCluster:
        """A ``RedisCluster`` over the startup nodes (it asks one for ``CLUSTER SLOTS`` and
        ``COMMAND``)."""
        kw = redis_kwargs(self.endpoint, self.config)
        for k in ("host", "port", "db"):
            kw.pop(k, None)
        if _REDIS_MAJOR < 6:  # before 6.0 cluster-level retries had their own argument
            kw["cluster_error_retry_attempts"] = 0
        nodes = [ClusterNode(h, p) for h, p in self._seeds]  # type: ignore[no-untyped-call]
        return RedisCluster(startup_nodes=nodes, require_full_coverage=False, **kw)

    def _refresh(self) -> None:
        """Reload redis-py's slot map (a master failed: its slots may have moved); at most
        once every second; errors are left to the next call."""
        now = time.monotonic()
        rc = self._cluster
        if rc is None or now - self._refreshed < _REFRESH_EVERY_S:
            return
        self._refreshed = now
        try:
            rc.nodes_manager.initialize()
        except Exception as e:
            log.debug("redis cluster: slot map refresh failed: %s", type(e).__name__)

    def _node(self, node: Node) -> NodeIO:
        """The payload machinery of one master (made on first use)."""
        with self._lock:
            io = self._nodes.get(node)
            if io is None:
                pool = Pool(lambda: node, self.endpoint, self.config, self._ctx)
                io = self._nodes[node] = NodeIO(pool, self.config, self.metrics, self._executor, _redirected)
            return io

    # -- the one place parts, concurrency and redirects are handled --------------------------
    def _execute(
        self,
        what: str,
        names: list[bytes],
        part: Callable[[Node, list[int], int], list[Any]],
        failed: Any,
        redirect: Callable[[RedisCluster, int], Any] | None = None,
    ) -> list[Any]:
        """Run ``part(node, indices, width)`` per owning master, concurrently (``width``: the
        node's share of ``parallel_connections``, at least 1), then ``redirect``
        (through redis-py) each key a part answered with :data:`_REDIRECT`. A part that
        raises fails its keys (``failed``); all of them: :class:`TransportError`. A
        ``Cancelled`` part raises once every part has ended."""
        rc = self._rc()
        out: list[Any] = [failed] * len(names)
        groups: dict[Node, list[int]] = {}
        by_slot: dict[int, list[int]] = {}
        for i, n in enumerate(names):
            by_slot.setdefault(key_slot(n), []).append(i)
        for idx in by_slot.values():
            try:
                node = rc.get_node_from_key(names[idx[0]])  # type: ignore[no-untyped-call]
            except rex.SlotNotCoveredError:
                continue  # stays failed
            groups.setdefault((node.host, int(node.port)), []).extend(idx)
        if not groups:
            raise TransportError(f"redis cluster {what}: no master owns these slots", reason="cluster")
        lock = threading.Lock()
        errors: list[TransportError] = []
        again: list[int] = []

        width = max(1, self.config.parallel_connections // len(groups))

        def run(node: Node, idx: list[int]) -> None:
            try:
                res = part(node, idx, width)
            except (TransportError, OSError, ReplyError, rex.RedisError) as e:
                if isinstance(e, TransportError) and e.reason == "cancelled":
                    raise
                with lock:
                    errors.append(transport_error(e, what, where(node)))
                return
            with lock:
                for i, r in zip(idx, res):
                    if r is _REDIRECT:
                        again.append(i)
                    else:
                        out[i] = r

        items = list(groups.items())
        run_together(self._workers, [partial(run, node, idx) for node, idx in items])
        if errors:
            self._refresh()
            if len(errors) == len(items):
                raise errors[0]
            log.debug(
                "redis cluster %s: %d of %d masters failed (%s)", what, len(errors), len(items), errors[0]
            )
        if redirect is not None:
            for i in again:
                try:
                    out[i] = redirect(rc, i)
                except (TransportError, OSError, rex.RedisError) as e:
                    if isinstance(e, TransportError) and e.reason == "cancelled":
                        raise
                    log.debug("redis cluster %s: a redirected key failed: %s", what, type(e).__name__)
        return out

    def _node_client(self, node: Node) -> Any:
        rc = self._rc()
        n = rc.get_node(host=node[0], port=node[1])  # type: ignore[no-untyped-call]
        if n is None:
            raise TransportError(f"redis cluster: {where(node)} is not in the slot map", reason="cluster")
        return rc.get_redis_connection(n)

    # -- Transport -----------------------------------------------------------------------------
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        if not keys:
            return []
        names = [self._prefix + k.encode() for k in keys]

        def part(node: Node, idx: list[int], _: int) -> list[Any]:
            got = run_commands(self._node_client(node), [("STRLEN", names[i]) for i in idx])
            return [_redirected(r, None) if isinstance(r, Exception) else r or None for r in got]

        def redirect(rc: RedisCluster, i: int) -> int | None:
            return rc.strlen(names[i]) or None

        return self._execute("exists", names, part, None, redirect)

    def read(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None = None
    ) -> list[bool]:
        if not keys:
            return []
        names = [self._prefix + k.encode() for k in keys]
        sizes = [sum(map(_nbytes, segs)) for segs in buffers]

        slots = [key_slot(n) for n in names]
        res: list[Any] = [False] * len(names)

        def by_slot(idx: list[int]) -> list[list[int]]:
            groups: dict[int, list[int]] = {}
            for i in idx:
                groups.setdefault(slots[i], []).append(i)
            return list(groups.values())

        def part(node: Node, idx: list[int], width: int) -> list[Any]:
            self._node(node).read(idx, names, sizes, buffers, res, cancel, groups=by_slot, width=width)
            return [res[i] for i in idx]

        def redirect(rc: RedisCluster, i: int) -> bool:
            value = rc.get(names[i])
            if not isinstance(value, bytes) or len(value) != sizes[i]:
                return False
            pos = 0
            for view in memoryviews(buffers[i]):
                if cancel is None:
                    view[:] = value[pos : pos + len(view)]
                else:
                    with cancel.guard():
                        view[:] = value[pos : pos + len(view)]
                pos += len(view)
            return True

        return self._execute("read", names, part, False, redirect)

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
        res: list[Any] = [False] * len(names)

        def part(node: Node, idx: list[int], width: int) -> list[Any]:
            self._node(node).write(idx, names, sizes, buffers, self._ttl_ms, res, cancel, width)
            return [res[i] for i in idx]

        def redirect(rc: RedisCluster, i: int) -> bool:
            if cancel is None:
                value = b"".join(memoryviews(buffers[i]))
            else:
                with cancel.guard():  # a snapshot: redis-py sends it after the guard
                    value = b"".join(memoryviews(buffers[i]))
            rc.set(names[i], value, nx=True, px=self._ttl_ms or None)
            return True

        return self._execute("write", names, part, False, redirect)

    def delete(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        names = [self._prefix + k.encode() for k in keys]

        def part(node: Node, idx: list[int], _: int) -> list[Any]:
            got = run_commands(self._node_client(node), [("UNLINK", names[i]) for i in idx])
            return [_redirected(r) if isinstance(r, Exception) else True for r in got]

        try:
            self._execute("delete", names, part, False, lambda rc, i: bool(rc.unlink(names[i])) or True)
        except TransportError as e:
            log.debug("redis cluster delete failed: %s", e)

    def clear(self, prefix: str) -> None:
        """``SCAN`` + ``UNLINK`` on every master (see :meth:`RedisTransport.clear`); raises
        :class:`TransportError` when a master failed (a later clear finishes the job)."""
        rc = self._rc()
        pattern = glob_escape(self.config.key_prefix + prefix)
        failed: list[TransportError] = []
        for node in rc.get_primaries():  # type: ignore[no-untyped-call]
            try:
                clear_matching(rc.get_redis_connection(node), pattern, per_key=True)
            except (OSError, rex.RedisError) as e:
                failed.append(transport_error(e, "clear", f"{node.host}:{node.port}"))
        if failed:
            raise failed[0]

    def health(self) -> bool:
        """True when some master answers ``PING``."""
        try:
            rc = self._rc()
        except TransportError:
            return False
        for node in rc.get_primaries():  # type: ignore[no-untyped-call]
            try:
                if rc.get_redis_connection(node).ping():
                    return True
            except (OSError, rex.RedisError):
                continue
        self._refresh()
        return False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            nodes = list(self._nodes.values())
            rc, self._cluster = self._cluster, None
        for io in nodes:
            io.close()
        if rc is not None:
            closing(rc)
        self._workers.shutdown(wait=False)
        self._executor.shutdown()

    def __repr__(self) -> str:
        return f"RedisClusterTransport(url={redact_url(self.config.url)!r}, key_prefix={self.config.key_prefix!r})"


def _redirected(e: BaseException, other: Any = False) -> Any:
    """:data:`_REDIRECT` for a ``MOVED`` / ``ASK`` answer, else ``other`` (this key fails)."""
    return _REDIRECT if isinstance(e, rex.AskError) or str(e).startswith(("MOVED ", "ASK ")) else other
