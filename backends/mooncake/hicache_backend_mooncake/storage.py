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

Per rank, as SGLang: the segment is ``global_segment_size // (tp_size * pp_size)``; a JSON
``device_name`` picks this tp rank's device; ``ssd_offload_path`` gets a
``rank_<dp>_<tp>_<pp>_<cp>`` folder of its own (created).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from hicache_sdk import Capabilities, ConfigError, PagedStorage
from hicache_sdk.keys.l3_layout import mooncake_layout

from .config import MooncakeConfig, per_rank_segment_size
from .mooncake_transport import MooncakeTransport

__all__ = ["MooncakeStorage"]

log = logging.getLogger(__name__)

#: Why a config whose client holds a segment is not ``persistent``.
NOT_PERSISTENT = (
    "global_segment_size > 0: this client holds a memory segment of its own, and the pages "
    "the cluster places there go away with the process (for pages that outlive it, run a "
    "separate holder, mooncake_client, and set global_segment_size to 0)"
)


class MooncakeStorage(PagedStorage):
    """Mooncake Store backend (entry point ``mooncake``). See the module docs."""

    config_cls: ClassVar[type[MooncakeConfig]] = MooncakeConfig
    transport_cls = MooncakeTransport
    backend_name = "mooncake"

    def create_transport(self, config: MooncakeConfig) -> MooncakeTransport:
        for message in config.unsupported():
            log.warning("mooncake: %s", message)
        sc = self.storage_config
        rank = dataclasses.replace(
            config,
            device_name=_rank_device(config.device_name, sc),
            ssd_offload_path=_rank_offload_path(config.ssd_offload_path, sc),
        )
        seg = per_rank_segment_size(config.segment_bytes, sc)
        return MooncakeTransport(rank, seg, remove_broken=config.key_scheme == "default")

    @classmethod
    def capabilities_for_config(
        cls, config: Mapping[str, Any], storage_config: Any = None
    ) -> tuple[Capabilities, dict[str, str]]:
        """The capabilities of a backend built with ``config`` (``extra_config``), and why
        each one that differs from the class's declaration does: a client that holds a
        segment (per-rank ``global_segment_size`` > 0) is not ``persistent``. A config
        that does not parse gets the class's declaration (construction will say why)."""
        try:
            cfg = cls.config_cls.from_mapping(config)
        except ConfigError:
            return cls.capabilities, {}
        if per_rank_segment_size(cfg.segment_bytes, storage_config) > 0:
            return dataclasses.replace(cls.capabilities, persistent=False), {"persistent": NOT_PERSISTENT}
        return cls.capabilities, {}

    def describe_l3_object_layout(
        self, *, sidecar_pool_specs: Iterable[Any], swa_trailing_pages: int | None, page_size: int
    ) -> dict[str, Any]:
        """SGLang 0.5.23's ``MooncakeStore.describe_l3_object_layout``: the object names
        of the registered pools, for KV-aware routers (see
        :mod:`hicache_sdk.keys.l3_layout`); equal to SGLang's after a JSON round trip for
        the same config and pools, ``enabled=False`` with SGLang's reason for an MHA model.
        Under the ``default`` key scheme the names are not SGLang's: a disabled layout
        saying so. ``NotRegisteredError`` before the KV pool is registered."""
        return self._sglang_layout(
            mooncake_layout,
            scheme="sglang-mooncake",
            names="SGLang's Mooncake object keys",
            sidecar_pool_specs=sidecar_pool_specs,
            swa_trailing_pages=swa_trailing_pages,
            page_size=page_size,
        )


def _rank_device(device_name: str, storage_config: Any) -> str:
    """SGLang's ``device_name``: a JSON object maps tp ranks (int or str keys) to devices;
    a rank it does not name, or JSON that does not parse, gets ``""`` (auto)."""
    if not device_name or not device_name.strip().startswith("{"):
        return device_name
    try:
        table = json.loads(device_name)
        rank = getattr(storage_config, "tp_rank", None)
        if rank is None:
            return ""
        return str(table.get(rank, "") or table.get(str(rank), "") or "")
    except (ValueError, AttributeError):
        log.warning(
            "mooncake: device_name is not valid JSON (%r): using automatic device choice", device_name
        )
        return ""


def _rank_offload_path(path: str | None, storage_config: Any) -> str | None:
    """SGLang's per-rank SSD offload folder ``<path>/rank_<dp>_<tp>_<pp>_<cp>`` (created):
    ranks sharing one folder corrupt each other's bucket files."""
    if path is None or storage_config is None:
        return path
    sc = storage_config
    sub = (
        f"rank_{getattr(sc, 'dp_rank', 0)}_{getattr(sc, 'tp_rank', 0)}"
        f"_{getattr(sc, 'pp_rank', 0)}_{getattr(sc, 'attn_cp_rank', 0)}"
    )
    full = os.path.join(path, sub)
    os.makedirs(full, exist_ok=True)
    return full
