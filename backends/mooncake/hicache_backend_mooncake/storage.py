"""``MooncakeStorage``: the paged adapter over :class:`MooncakeTransport`.

Host pool buffers are registered with the store once, when the pool is registered, as
SGLang's MooncakeStore does (each tensor of ``get_hybrid_pool_buffer()``, else
``kv_buffer``; a logical anchor with no buffer registers nothing), and unregistered on
close: the adapter does it through ``Transport.register_memory`` (see the kit). Two transfer modes:

* deadlines on (``transfer_timeout_s > 0``, the default): reads land in registered SDK
  staging memory and are copied into the pool only when they finished in time; writes are
  snapshotted into staging first, so an abandoned ``batch_put_from`` never reads host
  pages that SGLang already reused.
* ``transfer_timeout_s: 0``: pages move straight between the pool and the store, bounded
  only by Mooncake's own timeouts (about 4.3 s per call with the master gone).
"""

from __future__ import annotations

from typing import ClassVar

from hicache_sdk import PagedStorage

from .config import MooncakeConfig, per_rank_segment_size
from .mooncake_transport import MooncakeTransport

__all__ = ["MooncakeStorage"]


class MooncakeStorage(PagedStorage):
    """Mooncake Store backend (entry point ``mooncake``). See the module docs."""

    config_cls: ClassVar[type[MooncakeConfig]] = MooncakeConfig
    transport_cls = MooncakeTransport
    backend_name = "mooncake"

    def create_transport(self, config: MooncakeConfig) -> MooncakeTransport:
        seg = per_rank_segment_size(config.segment_bytes, self.storage_config)
        return MooncakeTransport(config, seg, remove_broken=config.key_scheme == "default")
