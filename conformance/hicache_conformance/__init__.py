"""hicache-conformance: the certification suite for hicache-sdk / SGLang HiCache L3
storage backends.

Three ways in, one body of tests: subclass :class:`BackendSuite`; or run
``pytest --hicache-backend NAME --hicache-config JSON|@file``; or
``hicache check NAME --config ... --report report.json``.
"""

from __future__ import annotations

from .base import NAMESPACE_PREFIX, Attached, BackendFactory
from .capabilities import level, requires
from .suite import BackendSuite, TransportTests

__version__ = "0.1.0"

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
