"""Optional dependencies behind extras: one import helper with one error shape.

``require("matplotlib", "plot")`` imports and returns the module, or raises
:class:`MissingExtraError` (an ``ImportError`` and a ``HiCacheError``) whose message names
the extra to install: ``... needs matplotlib: pip install 'hicache-sdk[plot]'``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import HiCacheError

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(HiCacheError, ImportError):
    """An optional dependency (an extra of ``hicache-sdk``) is not installed."""


def require(module: str, extra: str, *, what: str = "") -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``hicache-sdk[extra]``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        purpose = f"{what} " if what else ""
        raise MissingExtraError(f"{purpose}needs {top} ({e}): pip install 'hicache-sdk[{extra}]'") from e
