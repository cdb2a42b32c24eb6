"""What a :class:`~hicache_sdk.sglang.linker.TransportLinker` is built from: its settings
(``linker_extra_config``), the rank it runs as, and the hicache-sdk backend it moves pages
with (the same names and settings as the ``dynamic`` HiCache bridge)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError

__all__ = ["LINKER_KEYS", "LinkerSettings", "rank_of", "model_name_of"]

#: The keys ``linker_extra_config`` may hold.
LINKER_KEYS = ("backend", "backend_config", "tp_rank", "tp_size", "ranged_reads", "staging", "staging_pages")


@dataclass(frozen=True)
class LinkerSettings:
    """``linker_extra_config``, checked.

    * ``backend``: a hicache-sdk backend name (``hicache backends``), an installed entry
      point or a ``module:Class`` path; required.
    * ``backend_config``: that backend's settings (a mapping; default ``{}``).
    * ``tp_rank`` / ``tp_size``: the rank, for a linker built outside a distributed group
      (the conformance suite does); by default read from ``torch.distributed`` and the
      server arguments.
    * ``ranged_reads``: load layer by layer through the transport's ranged reads (``true``),
      or page by page (``false``); by default (``null``) layer by layer where the backend's
      transport reads ranges cheaply (file, Mooncake), for plain models. ``true`` on a
      backend that cannot, or for a model with pools beside its KV (SWA, Mamba, DSA, DeepSeek
      V4: loaded pool by pool), is a ``ConfigError``.
      Ranged reads run under the backend's resilience layer (deadline, breaker, staging).
    * ``staging``: move pages through the host staging ring (:mod:`.staging`); by default
      (``null``) exactly when the device pool is not on the CPU. ``false`` with a CUDA pool
      is a ``ConfigError`` (a transport cannot address device memory).
    * ``staging_pages``: pages per half of the ring (default 64; the ring holds twice that).
    """

    backend: str
    backend_config: Mapping[str, Any]
    tp_rank: int | None = None
    tp_size: int | None = None
    ranged_reads: bool | None = None
    staging: bool | None = None
    staging_pages: int = 64

    @classmethod
    def from_mapping(cls, extra: Any) -> LinkerSettings:
        if extra is None:
            extra = {}
        if not isinstance(extra, Mapping):
            raise ConfigError(f"linker_extra_config must be a JSON object, got {type(extra).__name__}")
        unknown = sorted(set(extra) - set(LINKER_KEYS))
        if unknown:
            raise ConfigError(f"linker_extra_config: unknown keys {unknown} (known: {list(LINKER_KEYS)})")
        backend = extra.get("backend")
        if not isinstance(backend, str) or not backend:
            raise ConfigError(
                "linker_extra_config['backend'] must name a hicache-sdk backend "
                f"(as listed by `hicache backends`), got {backend!r}"
            )
        config = extra.get("backend_config")
        if config is None:
            config = {}
        if not isinstance(config, Mapping):
            raise ConfigError(
                f"linker_extra_config['backend_config'] must be a JSON object, got {type(config).__name__}"
            )
        ranks: dict[str, int | None] = {}
        for key in ("tp_rank", "tp_size"):
            value = extra.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"linker_extra_config[{key!r}] must be an int >= 0, got {value!r}")
            ranks[key] = value
        if ranks["tp_size"] == 0:
            raise ConfigError("linker_extra_config['tp_size'] must be >= 1")
        ranged = extra.get("ranged_reads")
        if ranged is not None and not isinstance(ranged, bool):
            raise ConfigError(
                f"linker_extra_config['ranged_reads'] must be true, false or null, got {ranged!r}"
            )
        staging = extra.get("staging")
        if staging is not None and not isinstance(staging, bool):
            raise ConfigError(f"linker_extra_config['staging'] must be true, false or null, got {staging!r}")
        pages = extra.get("staging_pages", 64)
        if isinstance(pages, bool) or not isinstance(pages, int) or pages < 1:
            raise ConfigError(f"linker_extra_config['staging_pages'] must be an int >= 1, got {pages!r}")
        return cls(backend, dict(config), ranks["tp_rank"], ranks["tp_size"], ranged, staging, pages)


def rank_of(settings: LinkerSettings, server_args: Any, params: Any) -> tuple[int, int]:
    """``(tp_rank, tp_size)``: the settings' when given, else the attention-TP (or TP)
    cache group's rank when ``torch.distributed`` is up, else rank 0 of
    ``server_args.tp_size``."""
    import torch

    rank, size = 0, int(getattr(server_args, "tp_size", 1) or 1)
    group = getattr(params, "attn_tp_cache_group", None) or getattr(params, "tp_cache_group", None)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank = torch.distributed.get_rank(group=group)
        size = torch.distributed.get_world_size(group=group)
    if settings.tp_rank is not None:
        rank = settings.tp_rank
    if settings.tp_size is not None:
        size = settings.tp_size
    if rank >= size:
        raise ConfigError(f"tp_rank {rank} is not below tp_size {size}")
    return rank, size


def model_name_of(server_args: Any) -> str | None:
    """The model name the HiCache path keys pages under: SGLang's ``model_path``."""
    for attr in ("model_path", "served_model_name"):
        value = getattr(server_args, attr, None)
        if isinstance(value, str) and value:
            return value
    return None
