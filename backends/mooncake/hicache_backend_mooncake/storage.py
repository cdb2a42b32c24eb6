"""``MooncakeStorage``: the paged adapter over :class:`MooncakeTransport`.

Host pool buffers are registered with the store once, when the pool is registered, as
SGLang's MooncakeStore does (each tensor of ``get_hybrid_pool_buffer()``, else
``kv_buffer``; a logical anchor with no buffer registers nothing), and unregistered on
close. Two transfer modes:

* deadlines on (``transfer_timeout_s > 0``, the default): reads land in registered SDK
  staging memory and are copied into the pool only when they finished in time; writes are
  snapshotted into staging first, so an abandoned ``batch_put_from`` never reads host
  pages that SGLang already reused.
* ``transfer_timeout_s: 0``: pages move straight between the pool and the store, bounded
  only by Mooncake's own timeouts (about 4.3 s per call with the master gone).
"""

from __future__ import annotations

from typing import Any, ClassVar

from hicache_sdk import PagedStorage

from .config import MooncakeConfig, per_rank_segment_size
from .transport import MooncakeTransport

__all__ = ["MooncakeStorage"]


def _pool_buffers(pool: Any) -> list[Any]:
    get = getattr(pool, "get_hybrid_pool_buffer", None)
    bufs = list(get()) if callable(get) else []
    if not bufs and getattr(pool, "kv_buffer", None) is not None:
        bufs = [pool.kv_buffer]
    return [b for b in bufs if b is not None and b.numel() * b.element_size() > 0]


class MooncakeStorage(PagedStorage):
    """Mooncake Store backend (entry point ``mooncake``). See the module docs."""

    config_cls: ClassVar[type[MooncakeConfig]] = MooncakeConfig
    transport_cls = MooncakeTransport
    backend_name = "mooncake"

    def create_transport(self, config: MooncakeConfig) -> MooncakeTransport:
        seg = per_rank_segment_size(config.segment_bytes, self.storage_config)
        return MooncakeTransport(config, seg, remove_broken=config.key_scheme == "default")

    def _register_pool(self, pool: Any) -> None:
        t = self.raw_transport
        assert isinstance(t, MooncakeTransport)
        for b in _pool_buffers(pool):
            t.register_memory(int(b.data_ptr()), int(b.numel() * b.element_size()))

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        self._register_pool(mem_pool_host)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        self._register_pool(host_pool)
