"""The SDK's exception hierarchy.

``ValueError`` (bad arguments at the API boundary) is never wrapped: programming errors
propagate as ``ValueError`` naming the argument. I/O failures never leave ``batch_*``
methods as exceptions; they become misses.
"""

from __future__ import annotations

__all__ = [
    "HiCacheError",
    "ConfigError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "DuplicateBackendError",
    "NotRegisteredError",
]


class HiCacheError(Exception):
    """Base class of every error the SDK raises on purpose."""


class ConfigError(HiCacheError, ValueError):
    """A backend configuration is invalid (unknown key, wrong type, bad URL, ...)."""


class BackendNotFoundError(HiCacheError, LookupError):
    """No backend is registered under the requested name."""


class BackendUnavailableError(HiCacheError, ImportError):
    """A backend is known but cannot be imported (a dependency is missing).

    The message names the missing module and the exact ``pip install`` command."""


class DuplicateBackendError(HiCacheError):
    """Two different distributions claim the same backend name."""


class NotRegisteredError(HiCacheError, RuntimeError):
    """A page operation was called before ``register_mem_pool_host``."""
