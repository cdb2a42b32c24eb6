"""SGLang's unified cache linker over any hicache-sdk backend (:class:`TransportLinker`).

:class:`TransportLinker` needs SGLang 0.5.23 or later (its base class lives there); it is
imported on first use, so the view, settings and staging ring here import without SGLang.
``hicache_sdk.sglang`` itself never imports this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .setup import LINKER_KEYS, LinkerSettings
from .view import DeviceKVView, layer_ranges

if TYPE_CHECKING:
    from .linker import LinkerLoadError, TransportLinker

__all__ = [
    "FIRST_SGLANG_RELEASE",
    "LINKER_CONFIG",
    "LINKER_KEYS",
    "DeviceKVView",
    "LinkerLoadError",
    "LinkerSettings",
    "TransportLinker",
    "layer_ranges",
]

#: The first SGLang release whose linker factory loads an outside linker (its ``dynamic``
#: backend): 0.5.17 to 0.5.22 ship parts of ``unified_cache/`` but only SGLang's own linkers.
FIRST_SGLANG_RELEASE = "0.5.23"

#: The loader keys of ``--unified-cache-external-linker-config`` for :class:`TransportLinker`.
LINKER_CONFIG = {"linker": "TransportLinker", "linker_module_path": "hicache_sdk.sglang.linker"}


def __getattr__(name: str) -> Any:
    if name in ("TransportLinker", "LinkerLoadError"):
        from . import linker

        return getattr(linker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
