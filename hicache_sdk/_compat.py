"""Deprecation aliases for the modules 0.2.0 moved (``CHANGELOG.md`` lists each move).

``import hicache_sdk.memory_backend`` (or any submodule of a moved package) still works: it
imports the module under its new name, registers it under the old one too, and warns once
with a :class:`DeprecationWarning` naming the new path. Names re-exported by
``hicache_sdk`` itself never moved.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "install"]

#: old module -> new module (a package's submodules follow it).
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
    "hicache_sdk.readpath.writepath": "hicache_sdk.hiradix.backup",
    "hicache_sdk.readpath": "hicache_sdk.hiradix",
    "hicache_sdk.paged.legacy": "hicache_sdk.paged.generic",
    "hicache_sdk.paged.plumbing": "hicache_sdk.paged.objectpath",
    "hicache_sdk.kit.failures": "hicache_sdk.transport",
}


def new_name(old: str) -> str | None:
    """The current name of a moved module (or a submodule of a moved package), else ``None``."""
    if old in MOVED:
        return MOVED[old]
    for prefix in sorted(MOVED, key=len, reverse=True):
        if old.startswith(prefix + "."):
            return MOVED[prefix] + old[len(prefix) :]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.target} in hicache-sdk 0.2.0; import it from there",
            DeprecationWarning,
            stacklevel=4,
        )
        module = importlib.import_module(self.target)
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module: ModuleType) -> None:
        pass  # the target module is already executed


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("hicache_sdk."):
            return None
        new = new_name(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
