"""``MooncakeTransport``: named objects in a Mooncake Store cluster, moved zero-copy.

* Reads and writes use ``batch_get_into`` / ``batch_put_from`` on per-object pointers (the
  ``*_multi_buffers`` variants when an object spans several segments). A read succeeds
  only when the returned byte count equals the buffers' total; ``get`` is never used (it
  returns ``b""`` both for a missing key and for an error).
* Writes are create-if-absent by Mooncake's own rule: ``put`` of an existing key returns 0
  and leaves the stored object untouched; ``OBJECT_ALREADY_EXISTS`` also counts as success.
* Those native calls cannot be cancelled: the transport is **not** cancellable, so the
  resilience layer stages reads and snapshots writes when deadlines are on. Its staging
  memory is registered here through :meth:`register_memory`.
* :meth:`exists` answers ``SIZE_UNKNOWN`` (one ``batch_is_exist`` round trip); the exact
  sizes (:class:`~hicache_sdk.transport.ExactSizes`) cost one ``get_size`` per key.
* Holder loss: Mooncake keeps answering ``is_exist`` = 1 for about ``client_ttl`` (10 s)
  after the holder died while every read fails with ``TRANSFER_FAIL``. Keys whose read
  failed that way are reported absent by :meth:`exists` for :data:`SUSPECT_S`, and a
  batch whose every object failed raises ``TransportError`` so the breaker counts it.
* Construction never blocks long: Mooncake's ``setup`` runs on a background thread, and
  construction waits for it at most ``setup_timeout_s``. ``setup`` holds the GIL while it
  waits for an absent master (about 90 s), so it is called only once the master answers a
  probe bounded by ``probe_timeout_s``: its HTTP ``/health`` with ``check_server`` (as
  SGLang), else a TCP connect to ``master_server_address``. Until setup succeeds (it is
  retried every 0.5 s) every call raises ``TransportError("connection")`` whose message
  says why (the failed probe, ``setup``'s return code, or setup still running), and each
  failed attempt is counted (``master_probe``, ``setup``).
* :meth:`health` is one ``batch_is_exist`` round trip to the master (Mooncake's own
  ``health_check()`` kept saying healthy 20 s after the master died).
* :meth:`close` never tears the store down under a running native call: the last call to
  finish gives the client up, to the process-wide cache of :mod:`.clients` (Mooncake's own
  close stalls the GIL for 1-2 s).
* Mooncake's binding reports every failure as a return code, so no exception type of its
  own means an I/O failure (:attr:`io_errors` is empty).
"""

from __future__ import annotations

import ctypes
import logging
import socket
import threading
import time
import urllib.request
from collections.abc import Sequence
from typing import Any, ClassVar

from hicache_sdk import SIZE_UNKNOWN, Capabilities, Segments, Transport, TransportError
from hicache_sdk.kit.batches import first_occurrences, swap_if_all
from hicache_sdk.transport import ExactSizes, Range, RangedReads, check_ranges

from . import clients
from .config import MooncakeConfig

__all__ = ["MooncakeTransport", "SUSPECT_S"]

log = logging.getLogger(__name__)

#: How long a key whose read failed with TRANSFER_FAIL is reported absent (Mooncake's
#: client_ttl of 10 s plus margin: by then the master has dropped the dead holder).
SUSPECT_S = 15.0
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
TRANSFER_FAIL = -800
RPC_FAIL = -900
_FATAL = (TRANSFER_FAIL, RPC_FAIL)
#: The key :meth:`MooncakeTransport.health` asks about (never written).
_HEALTH_KEY = "hicache-health-probe"
#: ``batch_is_exist`` code -> ``exists`` answer (1: present, size unknown; anything else absent)
_PRESENT: dict[int, int | None] = {1: SIZE_UNKNOWN}


def _copy_segments(src: Segments, dst: Segments) -> bool:
    """Copy the concatenation of ``src`` into ``dst``; False when the totals differ."""
    if sum(n for _, n in src) != sum(n for _, n in dst):
        return False
    data = b"".join(ctypes.string_at(a, n) for a, n in src)
    off = 0
    for a, n in dst:
        ctypes.memmove(a, data[off : off + n], n)
        off += n
    return True


def _regex_literal(text: str) -> str:
    """``text`` as a literal in the master's regex (ECMAScript syntax): a backslash before
    each syntax character, nothing else escaped."""
    return "".join("\\" + ch if ch in _REGEX_SYNTAX else ch for ch in text)


_REGEX_SYNTAX = frozenset("\\^$.|?*+()[]{}")


def _load_store_class() -> Any:
    try:
        from mooncake.store import MooncakeDistributedStore
    except ImportError as e:
        raise ImportError(
            f"the Mooncake backend needs the 'mooncake' module ({e}); install it with "
            "pip install 'hicache-backend-mooncake[cpu]' (and apt-get install libibverbs1) "
            "or 'hicache-backend-mooncake[cuda]'"
        ) from e
    return MooncakeDistributedStore


# At import, so that `hicache backends` reports the backend unavailable (with the install
# command) when the mooncake module is missing, rather than failing at construction.
_STORE_CLASS = _load_store_class()


class MooncakeTransport(Transport, RangedReads, ExactSizes):
    """Objects in Mooncake Store. Thread-safe. See the module docs for the failure rules."""

    capabilities = Capabilities(
        persistent=True, shared_across_processes=True, eviction=True, delete=True, health=True
    )
    max_segments = 1 << 30
    #: None: the binding returns error codes and raises nothing for an I/O failure.
    io_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    #: ``read_ranges`` is one zero-copy call whatever the number of ranges
    cheap_ranges = True

    def __init__(self, config: MooncakeConfig, segment_bytes: int, *, remove_broken: bool = False) -> None:
        self._cfg = config
        self._segment_bytes = int(segment_bytes)
        self._remove_broken = remove_broken
        host, _, port = config.master_server_address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(
                f"master_server_address must be 'host:port', got {config.master_server_address!r}"
            )
        self._health_url = f"http://{host}:{config.master_metrics_port}/health"
        self._cls = _STORE_CLASS
        self._store: Any = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        #: one entry per native call in flight (``list.append`` / ``pop`` are atomic under
        #: the GIL: no lock on the hot path; see :meth:`_enter`)
        self._running: list[None] = []
        self._closed = False
        self._registered: dict[int, int] = {}
        self._suspects: dict[str, float] = {}
        self._setup_error = "setup still running"
        self._key = clients.key_of(config, self._segment_bytes)
        self._tried = threading.Event()  # the first setup attempt ended (either way)
        threading.Thread(target=self._setup_until_up, name="mooncake-setup", daemon=True).start()
        self._tried.wait(config.setup_timeout_s)

    # -- setup -------------------------------------------------------------------------
    def _probe(self, timeout: float) -> str | None:
        """``None`` when the master's ``/health`` says it serves, else why not."""
        try:
            with urllib.request.urlopen(self._health_url, timeout=timeout) as r:
                body = r.read()
                if r.status == 200 and b'"service_ready":true' in body.replace(b" ", b""):
                    return None
                return f"{self._health_url} answered HTTP {r.status} without service_ready"
        except Exception as e:  # any failure to get an answer is the reason
            return f"{self._health_url} did not answer ({type(e).__name__}: {e})"

    def _connects(self, timeout: float) -> str | None:
        """``None`` when the master's RPC port accepts a TCP connection, else why not.
        Mooncake's ``setup`` holds the GIL while it waits for an absent master (about
        90 s), stalling every thread of the process, so it is only called once the port
        answers."""
        host, _, port = self._cfg.master_server_address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return None
        except OSError as e:
            return f"{self._cfg.master_server_address} does not accept connections ({type(e).__name__}: {e})"

    def _new_store(self) -> Any:
        """A set-up client, or ``None`` (the reason in ``_setup_error``)."""
        c = self._cfg
        store = self._cls()
        extra: dict[str, Any] = {}
        if c.enable_ssd_offload:
            extra["enable_ssd_offload"] = True
        if c.ssd_offload_path is not None:
            extra["ssd_offload_path"] = c.ssd_offload_path
        # SGLang passes tenant_id only when it is not the default (older wheels lack it).
        if c.tenant_id != "default":
            extra["tenant_id"] = c.tenant_id
        rc = store.setup(
            c.local_hostname,
            c.metadata_server,
            self._segment_bytes,
            c.buffer_bytes,
            c.protocol,
            c.device_name,
            c.master_server_address,
            **extra,
        )
        if rc != 0:
            self._setup_error = f"setup() against master {c.master_server_address} returned {rc}"
            log.warning("mooncake %s", self._setup_error)
            return None
        return store

    def _setup(self) -> bool:
        store = clients.acquire(self._key, self._new_store)
        if store is None:
            return False
        with self._lock:
            if not self._closed:
                for addr, n in self._registered.items():
                    clients.register(self._key, store, addr, n)
                self._store = store
                return True
        clients.release(self._key, store)
        return True

    def _setup_until_up(self) -> None:
        """Set up (after the ``/health`` probe with ``check_server``); retried every 0.5 s
        until it succeeds or the transport is closed. Each failure is counted."""
        while not self._closed:
            if self._cfg.check_server:
                why = self._probe(self._cfg.probe_timeout_s)
            else:
                why = self._connects(self._cfg.probe_timeout_s)
            if why is not None:
                self._setup_error = f"master probe failed: {why}"
                self.count_failure("master_probe")
                self._tried.set()
                time.sleep(0.5)
                continue
            up = self._setup()
            self._tried.set()
            if up:
                return
            self.count_failure("setup")
            time.sleep(0.5)

    @property
    def ready(self) -> bool:
        return self._store is not None

    # -- call accounting ----------------------------------------------------------------
    def _enter(self) -> Any:
        """The client for one native call, counted running until :meth:`_leave`. No lock:
        the call is counted first and checks ``_closed`` after, while :meth:`close` sets
        ``_closed`` first and then waits for the count to reach zero, so a call either sees
        the transport closed or is waited for (and its client stays up until it leaves)."""
        self._running.append(None)
        store = self._store
        if self._closed or store is None:
            closed = self._closed
            self._leave()
            if closed:
                raise TransportError("mooncake transport is closed", reason="closed")
            raise TransportError(
                f"mooncake store not set up ({self._setup_error}; master {self._cfg.master_server_address})",
                reason="connection",
            )
        return store

    def _leave(self) -> None:
        self._running.pop()
        if self._closed:  # only close() waits on _idle; the last call to end gives the client up
            with self._lock:
                self._idle.notify_all()
                if not self._running and self._store is not None:
                    self._teardown()

    def _teardown(self) -> None:  # under self._lock, no call running
        store, self._store = self._store, None
        for addr in list(self._registered):
            clients.unregister(self._key, store, addr)
        self._registered.clear()
        clients.release(self._key, store)

    # -- memory registration -------------------------------------------------------------
    def register_memory(self, address: int, nbytes: int) -> None:
        """Register ``[address, address+nbytes)`` for transfers (once per address; also
        done after a background setup). Required by RDMA, free with tcp."""
        if nbytes <= 0:
            return
        with self._lock:
            if address in self._registered or self._closed:
                return
            self._registered[address] = nbytes
            store = self._store
            if store is not None:
                rc = clients.register(self._key, store, address, nbytes)
                if rc != 0:
                    del self._registered[address]
                    raise TransportError(f"register_buffer failed (rc={rc})", reason="register")

    def unregister_memory(self, address: int, nbytes: int = 0) -> None:
        with self._lock:
            if self._registered.pop(address, None) is not None and self._store is not None:
                clients.unregister(self._key, self._store, address)

    # -- helpers -----------------------------------------------------------------------
    def _suspect(self, key: str) -> bool:
        t = self._suspects.get(key)
        if t is None:
            return False
        if time.monotonic() - t > SUSPECT_S:
            self._suspects.pop(key, None)
            return False
        return True

    def _mark_suspects(self, keys: Sequence[str]) -> None:
        now = time.monotonic()
        if len(self._suspects) > 65536:
            self._suspects = {k: t for k, t in self._suspects.items() if now - t <= SUSPECT_S}
        for k in keys:
            self._suspects[k] = now

    @staticmethod
    def _whole_batch_failed(op: str, codes: Sequence[int]) -> None:
        if codes and all(c in _FATAL for c in codes):
            reason = "connection" if codes[0] == RPC_FAIL else "transfer"
            raise TransportError(f"mooncake {op}: every object failed (rc={codes[0]})", reason=reason)

    # -- Transport ---------------------------------------------------------------------
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        """``SIZE_UNKNOWN`` when present, ``None`` when absent, on error, or while the key's
        holder is suspected dead (a recent TRANSFER_FAIL). All errors -> ``TransportError``."""
        if not keys:
            return []
        keys = keys if isinstance(keys, list) else list(keys)
        store = self._enter()
        try:
            codes = store.batch_is_exist(keys)
        finally:
            self._leave()
        n = len(keys)
        # all present (the usual prefix hit): the answer made in the client's list, one C pass
        if len(codes) == n and not self._suspects and swap_if_all(codes, 1, SIZE_UNKNOWN):
            return codes  # type: ignore[no-any-return]
        if len(codes) != n or max(codes) < 0:
            raise TransportError("mooncake batch_is_exist failed", reason="connection")
        if self._suspects:
            return [SIZE_UNKNOWN if c == 1 and not self._suspect(k) else None for k, c in zip(keys, codes)]
        return list(map(_PRESENT.get, codes))

    def exact_sizes(self, keys: Sequence[str]) -> list[int | None]:
        """Each object's stored size (``get_size``, one master query per key: Mooncake has no
        batched size query), ``None`` when absent or while the key's holder is suspected dead.
        A failed master query (``RPC_FAIL``) -> ``TransportError``."""
        if not keys:
            return []
        store = self._enter()
        try:
            codes = [int(store.get_size(k)) for k in keys]
        finally:
            self._leave()
        if codes and all(c == RPC_FAIL for c in codes):
            raise TransportError("mooncake get_size failed", reason="connection")
        return [c if c >= 0 and not self._suspect(k) else None for k, c in zip(keys, codes)]

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        """True only when the stored object's byte count equals the buffers' total.
        Duplicate keys: the object is read once and copied into the other buffers
        (Mooncake fills only one destination per key in a batch)."""
        if not keys:
            return []
        dup = first_occurrences(keys)
        if dup is not None:
            keep, owner = dup
            got = self.read([keys[i] for i in keep], [buffers[i] for i in keep])
            out = []
            for i, j in enumerate(owner):
                src = keep[j]
                out.append(_copy_segments(buffers[src], buffers[i]) if i != src and got[j] else got[j])
            return out
        keys = keys if isinstance(keys, list) else list(keys)
        single = set(map(len, buffers)) == {1}
        want = [s[0][1] for s in buffers] if single else [sum(n for _, n in s) for s in buffers]
        store = self._enter()
        try:
            if single:
                codes = store.batch_get_into(keys, [segs[0][0] for segs in buffers], want)
            else:
                codes = store.batch_get_into_multi_buffers(
                    keys, [[a for a, _ in s] for s in buffers], [[n for _, n in s] for s in buffers]
                )
        finally:
            self._leave()
        if codes == want:  # every object read whole: the common case, at C speed
            return [True] * len(keys)
        if len(codes) != len(keys):
            raise TransportError("mooncake batch_get_into: wrong result length", reason="io")
        self._mark_suspects([k for k, c in zip(keys, codes) if c == TRANSFER_FAIL])
        self._whole_batch_failed("read", codes)
        result = [c == w for c, w in zip(codes, want)]
        broken = [k for k, c, w in zip(keys, codes, want) if (c >= 0 and c != w) or c == -600]
        if broken and self._remove_broken:
            self.delete(broken)  # ours and broken (default scheme only); errors swallowed
        return result

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> bool:
        """Native ranged reads (:mod:`.ranges`): one size query and one zero-copy call.
        A missing object, a range past the end or a failed transfer is ``False``."""
        from .ranges import read_ranges_with

        check_ranges(ranges)  # bad input raises before any I/O
        try:
            store = self._enter()
        except TransportError as e:
            self.count_failure(e.reason)
            return False
        try:
            ok, reason = read_ranges_with(store, key, ranges)
        finally:
            self._leave()
        if reason is not None:
            self.count_failure(reason)
        return ok

    def read_ranges_batch(self, keys: Sequence[str], ranges: Sequence[Sequence[Range]]) -> list[bool]:
        """``read_ranges`` of many objects: a size query each, then one get session and one
        zero-copy ranged call for all of them (:mod:`.ranges`)."""
        from .ranges import read_ranges_batch_with

        if len(keys) != len(ranges):
            raise ValueError(f"ranges: expected {len(keys)} entries (one per key), got {len(ranges)}")
        for i, r in enumerate(ranges):
            check_ranges(r, f"ranges[{i}]")  # bad input raises before any I/O
        if not keys:
            return []
        try:
            store = self._enter()
        except TransportError as e:
            self.count_failure(e.reason, len(keys))
            return [False] * len(keys)
        try:
            out, reasons = read_ranges_batch_with(store, keys, ranges)
        finally:
            self._leave()
        for reason in reasons:
            self.count_failure(reason)
        return out

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        """Create-if-absent (Mooncake ``put`` never overwrites); an existing key is success.
        Duplicate keys in one batch: the first is written, the others share its result."""
        if not keys:
            return []
        dup = first_occurrences(keys)
        if dup is not None:
            keep, owner = dup
            got = self.write([keys[i] for i in keep], [buffers[i] for i in keep])
            return [got[j] for j in owner]
        keys = keys if isinstance(keys, list) else list(keys)
        store = self._enter()
        try:
            if set(map(len, buffers)) == {1}:
                codes = store.batch_put_from(keys, [s[0][0] for s in buffers], [s[0][1] for s in buffers])
            else:
                codes = store.batch_put_from_multi_buffers(
                    keys, [[a for a, _ in s] for s in buffers], [[n for _, n in s] for s in buffers]
                )
        finally:
            self._leave()
        if len(codes) == len(keys) and not any(codes):  # every object written: the common case
            return [True] * len(keys)
        if len(codes) != len(keys):
            raise TransportError("mooncake batch_put_from: wrong result length", reason="io")
        self._whole_batch_failed("write", codes)
        return [c == 0 or c == OBJECT_ALREADY_EXISTS for c in codes]

    def _remove(self, keys: Sequence[str]) -> None:
        store = self._enter()
        try:
            store.batch_remove(list(dict.fromkeys(keys)), True)
        finally:
            self._leave()

    def delete(self, keys: Sequence[str]) -> None:
        """Forced removal (Mooncake refuses a leased object otherwise); errors swallowed."""
        if not keys:
            return
        try:
            self._remove(keys)
        except TransportError:
            pass

    def clear(self, prefix: str) -> None:
        """Forced removal of every object whose key starts with ``prefix``
        (``remove_by_regex``; never ``remove_all``). The key scheme's prefix ends at its
        delimiter (the default scheme's ``{ns}/{model}/``), so model ``m_x`` is not inside
        ``m``. A prefix that is empty or does not end with ``/`` raises ``ValueError``: a
        Mooncake cluster is shared, and such a prefix could reach other owners' objects."""
        if not prefix or not prefix.endswith("/"):
            raise ValueError(
                f"clear: refusing prefix {prefix!r}: it must be non-empty and end with '/' "
                "(a Mooncake cluster is shared)"
            )
        store = self._enter()
        try:
            rc = store.remove_by_regex("^" + _regex_literal(prefix), True)
        finally:
            self._leave()
        if rc < 0:
            raise TransportError(f"mooncake remove_by_regex failed (rc={rc})", reason="connection")

    def health(self) -> bool:
        """Set up, and the master answers one existence query (a real round trip; with the
        master down or frozen it fails or hangs, and the resilience layer's deadline bounds
        it). ``health_check()`` is not used: it kept saying healthy 20 s after the master died."""
        if self._closed or self._store is None:
            return False
        store = self._enter()
        try:
            codes = store.batch_is_exist([_HEALTH_KEY])
        finally:
            self._leave()
        return len(codes) == 1 and codes[0] >= 0

    def close(self) -> None:
        """Idempotent. Waits briefly for running native calls; if one still runs, the last
        to finish closes the store (never torn down under a running call)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._idle.wait_for(lambda: not self._running, timeout=1.0)
            if not self._running and self._store is not None:
                self._teardown()

    def __repr__(self) -> str:
        return f"MooncakeTransport(master={self._cfg.master_server_address!r}, ready={self.ready})"
