"""Process-wide sharing of Mooncake clients.

Why: ``MooncakeDistributedStore.close()`` (and its destructor) waits for the next tick of
the client's 1 s background thread, 2 s with a segment, **holding the GIL** the whole
time, so every Python thread of the process stalls for up to 1-2 s per closed client.
Backends of one process with the same settings (segment size included) therefore use one
client:

* :func:`acquire` hands out the cached client for those settings (creating it with
  ``setup`` on first use) and counts the reference; :func:`release` drops it.
* A client nobody uses stays cached (at most :data:`MAX_IDLE` of them; the oldest idle one
  beyond that is closed) and is closed at interpreter exit, after the deadline runners'
  bounded exit drain (``HICACHE_EXIT_DRAIN_S``).
* Memory registration is counted per address, so two backends registering the same
  buffer do not unregister it under each other.

A client that holds a segment (``global_segment_size`` > 0) is shared the same way, so its
segment, and the pages the cluster placed in it, stay until the process exits (or the idle
client is evicted): they outlive a backend object, never the process.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClientKey", "key_of", "acquire", "release", "register", "unregister", "MAX_IDLE"]

#: Idle shared clients kept for reuse (each costs a 16 MiB transfer buffer and a heartbeat).
MAX_IDLE = 2

#: Every argument of ``setup``: (master, metadata server, protocol, device, local hostname,
#: local buffer bytes, tenant, segment bytes, SSD offload on, SSD offload path).
ClientKey = tuple[str, str, str, str, str, int, str, int, bool, str]


def key_of(config: Any, segment_bytes: int = 0) -> ClientKey:
    """The sharing key of a ``MooncakeConfig`` and this rank's segment size."""
    c = config
    return (
        c.master_server_address,
        c.metadata_server,
        c.protocol,
        c.device_name,
        c.local_hostname,
        c.buffer_bytes,
        c.tenant_id,
        int(segment_bytes),
        bool(c.enable_ssd_offload),
        c.ssd_offload_path or "",
    )


@dataclass
class _Entry:
    store: Any
    refs: int = 0
    buffers: dict[int, list[int]] = field(default_factory=dict)  # address -> [nbytes, count]


_lock = threading.Lock()
_clients: dict[ClientKey, _Entry] = {}
_idle: list[ClientKey] = []  # oldest first


def acquire(key: ClientKey, make: Callable[[], Any]) -> Any:
    """The shared client for ``key`` (one more reference). ``make()`` builds and sets up a
    new one, returning ``None`` on failure (then ``None`` is returned, no reference taken)."""
    with _lock:
        e = _clients.get(key)
        if e is not None:
            e.refs += 1
            if key in _idle:
                _idle.remove(key)
            return e.store
    store = make()  # outside the lock: setup talks to the master
    if store is None:
        return None
    spare = None
    with _lock:
        e = _clients.get(key)
        if e is None:
            e = _clients[key] = _Entry(store)
        else:  # another thread set one up meanwhile: use it, drop ours
            spare = store
        e.refs += 1
        if key in _idle:
            _idle.remove(key)
        out = e.store
    if spare is not None:
        spare.close()
    return out


def release(key: ClientKey, store: Any) -> None:
    """Drop one reference; an unused client is cached idle (see the module docs)."""
    evict: list[Any] = []
    with _lock:
        e = _clients.get(key)
        if e is None or e.store is not store or e.refs <= 0:
            return
        e.refs -= 1
        if e.refs > 0:
            return
        _idle.append(key)
        while len(_idle) > MAX_IDLE:
            old = _idle.pop(0)
            evict.append(_clients.pop(old).store)
    for s in evict:
        s.close()


def register(key: ClientKey, store: Any, address: int, nbytes: int) -> int:
    """``register_buffer`` once per address on the shared client (directly on a client
    that is not the shared one of ``key``); returns its rc."""
    with _lock:
        e = _clients.get(key)
        if e is None or e.store is not store:
            return int(store.register_buffer(address, nbytes))
        held = e.buffers.get(address)
        if held is not None:
            held[1] += 1
            return 0
        rc = int(store.register_buffer(address, nbytes))
        if rc == 0:
            e.buffers[address] = [nbytes, 1]
        return rc


def unregister(key: ClientKey, store: Any, address: int) -> None:
    """Undo one :func:`register`; the buffer is unregistered when nobody holds it."""
    with _lock:
        e = _clients.get(key)
        if e is None or e.store is not store:
            store.unregister_buffer(address)
            return
        held = e.buffers.get(address)
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del e.buffers[address]
            store.unregister_buffer(address)


def _close_idle() -> None:
    # Registered after the SDK's own exit drain, so run before it (atexit is LIFO): let
    # running calls end first (bounded), so that the clients they release are closed too.
    from hicache_sdk.resilience.deadline import drain_all, exit_drain_s

    drain_all(exit_drain_s())
    with _lock:
        stores = [_clients.pop(k).store for k in _idle if k in _clients]
        _idle.clear()
    for s in stores:
        s.close()


atexit.register(_close_idle)
