"""``hicache sglang-args NAME --linker``: the SGLang flags that load
:class:`~hicache_sdk.sglang.linker.TransportLinker` over a backend (SGLang 0.5.23 on)::

    --enable-unified-cache-external-linker --unified-cache-external-linker-backend dynamic
    --unified-cache-external-linker-config '{"linker": "TransportLinker", ...}'

The config is validated against the backend's typed config first. SGLang reads the linker
config as inline JSON only (it has no ``@file`` form), so a config holding a secret (a
field the backend declares secret, or a URL with credentials) is refused: set the secret
through the backend's environment variables instead.
"""

from __future__ import annotations

import json
from typing import Any

from ..config import BackendConfig
from ..errors import ConfigError
from ..registry import resolve_backend
from .secrets import secret_keys

__all__ = ["LINKER_LOADER", "build_linker_args"]

#: The loader keys of the linker config (``hicache_sdk.sglang.linker.LINKER_CONFIG``,
#: restated so the CLI never imports SGLang).
LINKER_LOADER = {"linker": "TransportLinker", "linker_module_path": "hicache_sdk.sglang.linker"}


def build_linker_args(name: str, config: dict[str, Any], *, dist: str | None = None) -> dict[str, Any]:
    """``{"args": [...], "linker_config": {...}}`` for backend ``name`` with ``config``.
    ``HiCacheError`` for an unknown backend or a bad config, ``ConfigError`` for a secret."""
    cls = resolve_backend(name, dist=dist)
    config_cls = getattr(cls, "config_cls", None)
    if isinstance(config_cls, type) and issubclass(config_cls, BackendConfig):
        config_cls.from_mapping(config)
    else:
        config_cls = None
    secrets = secret_keys(config_cls, config)
    if secrets:
        raise ConfigError(
            f"key(s) {', '.join(secrets)} hold a secret, and SGLang's linker config is inline JSON "
            "on the command line (it has no @file form): set them through the backend's environment "
            "variables instead"
        )
    doc = {**LINKER_LOADER, "linker_extra_config": {"backend": name, "backend_config": dict(config)}}
    return {
        "args": [
            "--enable-unified-cache-external-linker",
            "--unified-cache-external-linker-backend",
            "dynamic",
            "--unified-cache-external-linker-config",
            json.dumps(doc),
        ],
        "linker_config": doc,
    }
