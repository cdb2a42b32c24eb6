"""Everything SGLang-specific: the bridge SGLang's ``dynamic`` backend loads
(:mod:`.bridge`, ``module_path: hicache_sdk.sglang``), its checks (:mod:`.checks`), SGLang's
own result types at the boundary (:mod:`.types`) and the one table of version facts
(:mod:`.versions`).

The bridge's names load on first access, so the SDK's own modules can read
:mod:`.versions` without importing the bridge (which imports SGLang when it is installed).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "BRIDGE_EXTRA_CONFIG",
    "SGLANG_METRICS_MODULE",
    "SGLANG_STORAGE_MODULE",
    "HiCacheSDKStorage",
    "sglang_storage_base",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module(".bridge", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover
    from .bridge import (
        BRIDGE_EXTRA_CONFIG as BRIDGE_EXTRA_CONFIG,
    )
    from .bridge import (
        SGLANG_METRICS_MODULE as SGLANG_METRICS_MODULE,
    )
    from .bridge import (
        SGLANG_STORAGE_MODULE as SGLANG_STORAGE_MODULE,
    )
    from .bridge import (
        HiCacheSDKStorage as HiCacheSDKStorage,
    )
    from .bridge import (
        sglang_storage_base as sglang_storage_base,
    )
