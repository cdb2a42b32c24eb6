"""hicache-conformance: the certification suite for hicache-sdk / SGLang HiCache L3
storage backends.

Three ways in, one body of tests: subclass :class:`BackendSuite`; or run
``pytest --hicache-backend NAME --hicache-config JSON|@file``; or
``hicache check NAME --config ... --report report.json``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .capabilities import level, requires

__version__ = "0.2.0"

_LAZY = {
    "BackendSuite": ".suite",
    "TransportTests": ".suite",
    "BackendFactory": ".base",
    "Attached": ".base",
    "NAMESPACE_PREFIX": ".base",
}


def __getattr__(name: str) -> Any:
    """The suite's classes load on first use: importing the package (``hicache check``,
    the pytest plugin) must not import hypothesis and torch before pytest starts."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hicache_conformance' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover
    from .base import NAMESPACE_PREFIX as NAMESPACE_PREFIX
    from .base import Attached as Attached
    from .base import BackendFactory as BackendFactory
    from .suite import BackendSuite as BackendSuite
    from .suite import TransportTests as TransportTests

__all__ = [
    "BackendSuite",
    "TransportTests",
    "BackendFactory",
    "Attached",
    "NAMESPACE_PREFIX",
    "level",
    "requires",
    "__version__",
]
