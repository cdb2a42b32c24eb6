"""The modules 0.2.0 moved: stub modules at their old paths (``CHANGELOG.md`` lists each move).

Each old path is a small module of its own (``hicache_sdk/memory_backend.py``, ...) that calls
:func:`alias`: ``import hicache_sdk.memory_backend`` warns once with a
:class:`DeprecationWarning` naming the new path and gives the new module itself (the same
object, so classes, ``isinstance`` checks and monkeypatching agree). A moved *package*
(``hicache_sdk.readpath``) keeps a stub package with one stub per submodule, and forwards its
attributes with :func:`forward`. Nothing is installed on ``sys.meta_path``: importing
``hicache_sdk`` changes no process-wide state, and only importing an old path does anything.
Names re-exported by ``hicache_sdk`` itself never moved.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from types import ModuleType

__all__ = ["MOVED", "alias", "forward"]

#: old module -> new module (every old path has a stub module; a package's submodules too).
MOVED: dict[str, str] = {
    "hicache_sdk.config_values": "hicache_sdk.config.values",
    "hicache_sdk.units": "hicache_sdk.config.units",
    "hicache_sdk.storage_config": "hicache_sdk.config.storage",
    "hicache_sdk.sglang_checks": "hicache_sdk.sglang.checks",
    "hicache_sdk.sglang_types": "hicache_sdk.sglang.types",
    "hicache_sdk.sglang_metrics": "hicache_sdk.metrics.endpoint",
    "hicache_sdk._profile": "hicache_sdk.sglang.versions",
    "hicache_sdk.prometheus": "hicache_sdk.metrics.prometheus",
    "hicache_sdk.resilience.metrics": "hicache_sdk.metrics.backend",
    "hicache_sdk.memory_backend": "hicache_sdk.memory",
    "hicache_sdk.readpath": "hicache_sdk.hiradix",
    **{
        f"hicache_sdk.readpath.{m}": f"hicache_sdk.hiradix.{m}"
        for m in (
            "cache",
            "clock",
            "counters",
            "devpool",
            "engine",
            "loadback",
            "prefetch",
            "prefetch_io",
            "ranks",
            "retry",
            "runner",
            "sidecars",
            "tree",
        )
    },
    "hicache_sdk.readpath.writepath": "hicache_sdk.hiradix.backup",
    "hicache_sdk.paged.legacy": "hicache_sdk.paged.generic",
    "hicache_sdk.paged.plumbing": "hicache_sdk.paged.objectpath",
    "hicache_sdk.kit.failures": "hicache_sdk.transport",
}


def _warn(old: str, new: str) -> None:
    # stacklevel 4: this function, alias/forward, the stub module, its importer (the import
    # system's own frames are skipped)
    warnings.warn(
        f"{old} moved to {new} in hicache-sdk 0.2.0; import it from there", DeprecationWarning, stacklevel=4
    )


def alias(old: str, new: str) -> ModuleType:
    """Called by the stub module ``old`` as it is imported: warn, then make ``old`` name the
    module ``new`` (``sys.modules``), which the import returns."""
    _warn(old, new)
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module


def forward(old: str, new: str) -> Callable[[str], object]:
    """Called by the stub package ``old`` as it is imported: warn, and return its module
    ``__getattr__``, which answers every name from the package ``new``. (A package cannot be
    aliased like a module: its submodules would then load a second time under the old name.)"""
    _warn(old, new)
    module = importlib.import_module(new)

    def __getattr__(name: str) -> object:
        try:
            return getattr(module, name)
        except AttributeError:
            raise AttributeError(f"module {old!r} ({new}) has no attribute {name!r}") from None

    return __getattr__
