"""``RedisClusterTransport``: the same wire behaviour as :class:`RedisTransport`, spread
over a Redis Cluster's masters.

* Topology: ``CLUSTER SLOTS`` from any reachable node (the startup nodes first); a key's
  slot is redis-py's ``key_slot`` (CRC16, hash tags honoured).
* A batch is split per node; the parts run concurrently (one thread per node, the caller
  being one); each part is one pipelined round trip on that node; results come back in key
  order. ``MGET`` commands group keys of one slot (Cluster refuses cross-slot ``MGET``) and
  are streamed as on a single server (see :mod:`.mget`).
* Redirects are handled in one place (:meth:`_execute`): keys answered with ``MOVED``
  refresh the slot map and are retried once on the new owner; ``ASK`` keys are retried once
  on the named node, each command preceded by ``ASKING``.
* A node that fails (killed master) fails only its keys (misses / ``False``); the batch
  raises :class:`TransportError` only when every part failed (so the breaker opens when the
  whole cluster is gone). With ``cluster-require-full-coverage no`` the other masters keep
  serving their slots meanwhile.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from operator import itemgetter
from typing import Any, ClassVar

from redis.crc import key_slot

from hicache_sdk import ConfigError, Segments, TransportError

from .config import RedisConfig, redact_url
from .frames import set_nx_suffix
from .mget import chunk_keys, stream_mget
from .pool import AuthError, Pool
from .redis_transport import RedisTransport, run_together
from .resp import CancelGuard, Connection, ProtocolError, ReplyError, command, views_of

__all__ = ["RedisClusterTransport"]

log = logging.getLogger(__name__)
_nbytes = itemgetter(1)  # of a segment
Node = tuple[str, int]
_GLOB = str.maketrans({c: "\\" + c for c in "*?[]\\"})


@dataclasses.dataclass(frozen=True)
class Redirect:
    kind: str  # "MOVED" or "ASK"
    node: Node


class _Round:
    """What one round of parts found: redirected keys, failed nodes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.redirects: dict[tuple[Node, bool], list[int]] = {}
        self.errors: list[str] = []
        self.moved = False


def _redirect(e: ReplyError) -> Redirect | None:
    parts = str(e).split()
    if len(parts) == 3 and parts[0] in ("MOVED", "ASK"):
        host, _, port = parts[2].rpartition(":")
        return Redirect(parts[0], (host, int(port)))
    return None


class RedisClusterTransport(RedisTransport):
    """A :class:`~hicache_sdk.Transport` over a Redis Cluster (see the module docs)."""

    #: Every part's receives into and sends from caller memory run under the cancel
    #: token's guard (a lane per worker thread), with the connection watching the token.
    cancellable: ClassVar[bool] = True

    def __init__(self, config: RedisConfig) -> None:
        super().__init__(config, probe=False)
        if self.endpoint.unix_path or self.endpoint.db:
            raise ConfigError("url: a cluster needs a redis:// or rediss:// url with database 0")
        self._seeds: list[Node] = [(self.endpoint.host, self.endpoint.port)]
        for s in config.startup_nodes:
            host, _, port = s.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"startup_nodes: expected 'host:port', got {s!r}")
            self._seeds.append((host, int(port)))
        self._lock = threading.Lock()
        self._pools: dict[Node, Pool] = {}
        self._slots: list[Node | None] = [None] * 16384
        self._workers = ThreadPoolExecutor(max_workers=16, thread_name_prefix="hicache-redis-cluster")
        # Credentials, TLS trust and ACL rights (on the prefix and on CLUSTER SLOTS), asked of
        # the node that owns the probe key when the slot map is known, else of the first seed.
        # Unreachable: fine (the breaker starts open); refused: a ConfigError naming the key.
        try:
            self._refresh()
        except AuthError:
            pass  # the probe below names the key
        owner = self._owner(self._prefix + b"__hicache_probe__") or self._seeds[0]
        self._probe(self._node_pool(owner), cluster=True)

    # -- topology --------------------------------------------------------------------------
    def _node_pool(self, node: Node) -> Pool:
        with self._lock:
            p = self._pools.get(node)
            if p is None:
                ep = dataclasses.replace(self.endpoint, host=node[0], port=node[1])
                p = self._pools[node] = Pool(ep, self.config)
            return p

    def _refresh(self) -> bool:
        """Reload the slot map from the first node that answers; False when none does."""
        with self._lock:
            known = list(dict.fromkeys([*self._seeds, *self._pools]))
        for node in known:
            try:
                with self._node_pool(node).connection() as c:
                    c.send([command("CLUSTER", "SLOTS")])
                    c.round_trips -= 1
                    reply: Any = c.reply()
            except (OSError, ProtocolError, ReplyError):
                continue
            except AuthError:
                if self._slots[0] is None and all(x is None for x in self._slots):
                    raise
                continue
            slots: list[Node | None] = [None] * 16384
            for start, end, master, *_ in reply:
                owner = (master[0].decode() or node[0], int(master[1]))
                for s in range(int(start), int(end) + 1):
                    slots[s] = owner
            with self._lock:
                self._slots = slots
            return True
        return False

    def _owner(self, name: bytes) -> Node | None:
        return self._slots[key_slot(name)]

    @property
    def round_trips(self) -> int:
        with self._lock:
            return sum(p.round_trips for p in self._pools.values())

    # -- the one place parts, concurrency and redirects are handled --------------------------
    def _execute(
        self,
        what: str,
        names: list[bytes],
        part: Callable[[Connection, list[int], bool], list[Any]],
        failed: Any,
        cancel: CancelGuard | None = None,
    ) -> list[Any]:
        """Run ``part`` per owning node (concurrently), then retry redirected keys once.
        With ``cancel``, each part's connection watches it; a cancelled part raises
        :class:`~hicache_sdk.errors.Cancelled` once every part has ended."""
        out: list[Any] = [failed] * len(names)
        if all(s is None for s in self._slots):
            self._refresh()
        groups: dict[tuple[Node, bool], list[int]] = {}
        for i, n in enumerate(names):
            owner = self._owner(n)
            if owner is not None:
                groups.setdefault((owner, False), []).append(i)
        if not groups:
            raise TransportError(f"redis cluster {what}: no slot map (no node answers)", reason="connection")
        for attempt in range(2):
            rnd = _Round()
            items = list(groups.items())
            run_together(
                self._workers, [partial(self._run_part, rnd, t, idx, part, out, cancel) for t, idx in items]
            )
            if rnd.errors and len(rnd.errors) == len(items) and attempt == 0:
                raise TransportError(
                    f"redis cluster {what}: every node failed ({rnd.errors[0]})", reason="connection"
                )
            if rnd.errors or rnd.moved:
                self._refresh()
            if not rnd.redirects:
                break
            groups = rnd.redirects
        return out

    def _run_part(
        self,
        rnd: _Round,
        target: tuple[Node, bool],
        idx: list[int],
        part: Callable[[Connection, list[int], bool], list[Any]],
        out: list[Any],
        cancel: CancelGuard | None = None,
    ) -> None:
        try:
            with self._node_pool(target[0]).connection() as c, c.watch(cancel):
                res = part(c, idx, target[1])
        except (OSError, ProtocolError, ReplyError, AuthError) as e:
            with rnd.lock:
                rnd.errors.append(type(e).__name__)
            return
        with rnd.lock:
            for i, r in zip(idx, res):
                if isinstance(r, Redirect):
                    rnd.moved |= r.kind == "MOVED"
                    rnd.redirects.setdefault((r.node, r.kind == "ASK"), []).append(i)
                else:
                    out[i] = r

    # -- parts (one pipelined round trip on one node) -----------------------------------------
    @staticmethod
    def _replies(c: Connection, cmds: list[bytes], asking: bool) -> None:
        if asking:
            cmds = [x for cmd in cmds for x in (command("ASKING"), cmd)]
        c.send(cmds)

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        if not keys:
            return []
        names = [self._prefix + k.encode() for k in keys]

        def part(c: Connection, idx: list[int], asking: bool) -> list[Any]:
            self._replies(c, [command("STRLEN", names[i]) for i in idx], asking)
            res: list[Any] = []
            for _ in idx:
                try:
                    if asking:
                        c.reply()
                    n = c.reply()
                    res.append(n if isinstance(n, int) and n > 0 else None)
                except ReplyError as e:
                    res.append(_redirect(e))
            return res

        return self._execute("exists", names, part, None)

    def read(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None = None
    ) -> list[bool]:
        if not keys:
            return []
        names = [self._prefix + k.encode() for k in keys]
        sizes = [sum(map(_nbytes, segs)) for segs in buffers]

        def part(c: Connection, idx: list[int], asking: bool) -> list[Any]:
            # j: position in this part; MGETs group keys of one slot (Cluster refuses others)
            by_slot: dict[int, list[int]] = {}
            for j, i in enumerate(idx):
                by_slot.setdefault(key_slot(names[i]), []).append(j)
            mine = [names[i] for i in idx]
            my_sizes = [sizes[i] for i in idx]
            res: list[Any] = [False] * len(idx)

            def refused(ch: Sequence[int], e: ReplyError) -> None:
                r = _redirect(e)
                for j in ch:
                    res[j] = r if r is not None else False

            chunks = chunk_keys(list(by_slot.values()), my_sizes, self.config.max_command_bytes)
            my_buffers = [buffers[i] for i in idx]
            stream_mget(c, mine, my_sizes, my_buffers, chunks, res, cancel, asking=asking, refused=refused)
            return res

        return self._execute("read", names, part, False, cancel)

    def write(
        self, keys: Sequence[str], buffers: Sequence[Segments], cancel: CancelGuard | None = None
    ) -> list[bool]:
        if not keys:
            return []
        names = [self._prefix + k.encode() for k in keys]
        tail, nargs = set_nx_suffix(self._ttl_ms)

        def part(c: Connection, idx: list[int], asking: bool) -> list[Any]:
            parts: list[bytes | memoryview] = []
            for i in idx:
                if asking:
                    parts.append(command("ASKING"))
                n = sum(s for _, s in buffers[i])
                parts.append(
                    b"*%d\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (nargs, len(names[i]), names[i], n)
                )
                parts.extend(views_of(buffers[i]))
                parts.append(tail)
            c.send(parts, cancel=cancel)
            res: list[Any] = []
            for _ in idx:
                try:
                    if asking:
                        c.reply()
                    c.reply()
                    res.append(True)
                except ReplyError as e:
                    res.append(_redirect(e) or False)
            return res

        return self._execute("write", names, part, False, cancel)

    def delete(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        names = [self._prefix + k.encode() for k in keys]

        def part(c: Connection, idx: list[int], asking: bool) -> list[Any]:
            self._replies(c, [command("UNLINK", names[i]) for i in idx], asking)
            res: list[Any] = []
            for _ in idx:
                try:
                    if asking:
                        c.reply()
                    c.reply()
                    res.append(True)
                except ReplyError as e:
                    res.append(_redirect(e) or False)
            return res

        try:
            self._execute("delete", names, part, False)
        except TransportError as e:
            log.debug("redis cluster delete failed: %s", e)

    def clear(self, prefix: str) -> None:
        """``SCAN`` + ``UNLINK`` on every master (per key, since keys span slots)."""
        self._refresh()
        with self._lock:
            masters = {n for n in self._slots if n is not None}
        pattern = (self.config.key_prefix + prefix).translate(_GLOB).encode() + b"*"
        for node in masters:
            try:
                with self._node_pool(node).connection() as c:
                    cursor = b"0"
                    while True:
                        c.send([command("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)])
                        reply: Any = c.reply()
                        cursor, found = reply[0], reply[1]
                        if found:
                            c.send([command("UNLINK", n) for n in found])
                            for _ in found:
                                c.reply()
                        if cursor == b"0":
                            break
            except (OSError, ProtocolError, ReplyError) as e:
                log.debug("redis cluster clear on a node failed: %s", type(e).__name__)

    def health(self) -> bool:
        """True when some node answers ``CLUSTER SLOTS`` (the slot map is refreshed)."""
        return self._refresh()

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
        for p in pools:
            p.close()
        self._workers.shutdown(wait=False)
        super().close()

    def __repr__(self) -> str:
        return f"RedisClusterTransport(url={redact_url(self.config.url)!r}, key_prefix={self.config.key_prefix!r})"
