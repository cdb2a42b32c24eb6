"""Pool registration for :class:`~hicache_sdk.paged.adapter.PagedStorage`: the anchor KV
pool and the extra (v2) pools, their layouts and header identities, host-memory
registration with the transport, and the writer role.

Rules: a pool's dtype, layout and geometry come from the pool, never from config. The
``"kv"`` v2 entry is the anchor. Each distinct host buffer is handed to
``Transport.register_memory`` once (the resilience layer unregisters it on close). A page
operation before the KV pool is registered raises :class:`~hicache_sdk.errors.NotRegisteredError`.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from ..errors import NotRegisteredError
from ..keys.scheme_base import KeyScheme
from ..spec import PoolName, pool_name_str
from ..transport import Transport
from .header import digest
from .pools import PoolState

__all__ = ["PoolRegistryMixin"]

_KV = PoolName.KV.value


class PoolRegistryMixin:
    """The registration half of ``PagedStorage`` (state set by its ``__init__``)."""

    storage_config: Any
    scheme: KeyScheme
    transport: Transport
    _lock: threading.Lock
    _kv: PoolState | None
    _pools: dict[str, PoolState]
    _registered_memory: set[tuple[int, int]]

    # -- identity ---------------------------------------------------------------------
    @property
    def is_storage_writer(self) -> bool:
        """Whether this rank writes rank-replicated pools."""
        sc = self.storage_config
        value = getattr(sc, "is_storage_writer", None)
        if value is None:  # SGLang < 0.5.23: MLA rank 0 writes
            return not getattr(sc, "is_mla_model", False) or getattr(sc, "tp_rank", 0) == 0
        return bool(value)

    def _may_write(self, state: PoolState) -> bool:
        return not state.layout.rank_replicated or self.is_storage_writer

    # -- registration -----------------------------------------------------------------
    def _describe(self, pool: Any, name: str, rank_replicated: bool | None) -> PoolState:
        from ..hostpool.describe import describe_pool

        layout = describe_pool(pool, name, rank_replicated=rank_replicated)
        if rank_replicated is None and layout.kind != "mamba" and name != PoolName.MAMBA.value:
            # SGLang names every non-Mamba sidecar rank-free exactly when the KV is (MLA).
            mla = bool(getattr(self.storage_config, "is_mla_model", False))
            layout = dataclasses.replace(layout, rank_replicated=mla)
        identity = digest(self.scheme.identity(layout)) if self.scheme.has_header else None
        return PoolState(name, pool, layout, identity)

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Register the anchor KV pool (rank-replicated when ``is_mla_model``). Its dtype,
        layout and geometry come from the pool, never from config."""
        rep = bool(getattr(self.storage_config, "is_mla_model", False))
        state = self._describe(mem_pool_host, _KV, rep)
        self._register_memory(mem_pool_host)
        with self._lock:
            self.mem_pool_host = mem_pool_host
            self._kv = state

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Register one pool by name (a PoolName -- ours or SGLang's -- or a str). The
        ``"kv"`` entry is the anchor: it registers it when none is yet, else it is kept
        as registered. Mamba is rank-sharded; other sidecars are rank-replicated exactly
        when the KV is (``is_mla_model``), as SGLang names them."""
        name = pool_name_str(host_pool_name)
        with self._lock:
            if not hasattr(self, "registered_pools"):
                self.registered_pools = {}
            self.registered_pools[host_pool_name] = host_pool
        if name == _KV:
            if self._kv is None or self._kv.pool is not host_pool:
                self.register_mem_pool_host(host_pool)
            return
        state = self._describe(host_pool, name, None)
        self._register_memory(host_pool)
        with self._lock:
            self._pools[name] = state

    def _register_memory(self, pool: Any) -> None:
        """Tell the transport, once per distinct buffer, which host memory it will be
        handed (``Transport.register_memory``); the resilience layer unregisters it on
        close. A failure fails the registration (``TransportError`` propagates)."""
        from ..hostpool.describe import pool_buffers

        for region in pool_buffers(pool):
            with self._lock:
                if region in self._registered_memory:
                    continue
                self._registered_memory.add(region)
            try:
                self.transport.register_memory(*region)
            except BaseException:
                with self._lock:
                    self._registered_memory.discard(region)
                raise

    def on_host_pools_registered(self) -> None:
        """Fails the attach (``NotRegisteredError``) when no KV pool was registered."""
        self._require_kv("on_host_pools_registered")

    def _require_kv(self, op: str) -> PoolState:
        kv = self._kv
        if kv is None:
            raise NotRegisteredError(
                f"{type(self).__name__}.{op}() called before register_mem_pool_host(): "
                "register the host KV pool first"
            )
        return kv

    def _require_kv_bytes(self, op: str) -> PoolState:
        kv = self._require_kv(op)
        if not kv.layout.has_buffer:
            raise ValueError(
                f"{op}: the KV pool is a logical anchor without a KV buffer; it has no KV pages "
                "to transfer (use batch_exists_v2 / batch_get_v2 for its extra pools)"
            )
        return kv

    def _lookup(self, name: str) -> PoolState:
        if name == _KV:
            return self._require_kv_bytes(f"transfer {name!r}")
        state = self._pools.get(name)
        if state is None:
            raise ValueError(f"pool {name!r} is not registered (register_mem_host_pool_v2 first)")
        return state
