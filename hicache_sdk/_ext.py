"""The optional C extensions, :mod:`hicache_sdk._native` (bulk copies, the deadline runner's
hand-off) and :mod:`hicache_sdk._hotpath` (per-batch hot-path work), or ``None`` where one did
not build. Every user has a pure-Python fallback with the same results; importing them here
keeps that decision in one place."""

from __future__ import annotations

try:
    from . import _native as native
except ImportError:  # pragma: no cover - built without a compiler
    native = None  # type: ignore[assignment]

try:
    from . import _hotpath as hotpath
except ImportError:  # pragma: no cover - built without a compiler
    hotpath = None  # type: ignore[assignment]

__all__ = ["hotpath", "native"]
