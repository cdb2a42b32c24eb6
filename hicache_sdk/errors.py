"""The SDK's exception hierarchy: one tree under :class:`HiCacheError`.

::

    HiCacheError
    ├── ConfigError (also ValueError)          bad configuration; the message names the key
    ├── BackendNotFoundError (LookupError)     no backend under that name
    ├── BackendUnavailableError (ImportError)  known, but a dependency is missing
    ├── DuplicateBackendError                  two distributions claim one name
    ├── NotRegisteredError (RuntimeError)      page operation before register_mem_pool_host
    └── TransportError                         a whole batch failed for an I/O reason
        └── Cancelled                          a cancellable call saw its token cancelled

Every failure to construct a backend is a :class:`HiCacheError` subclass naming the key or
the cause.

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
    "TransportError",
    "Cancelled",
    "ClearRefusedError",
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


class TransportError(HiCacheError):
    """A whole batch failed for an I/O reason (connection refused, timeout, ...).

    ``reason`` is a short stable token used as a metrics label (``"connection"``,
    ``"timeout"``, ``"disk_full"``, ...). The message must not contain secrets. Raised by
    a transport to the adapter, which turns it into misses and counts the reason; it never
    leaves a ``batch_*`` method.
    """

    def __init__(self, message: str, reason: str = "io") -> None:
        super().__init__(message)
        self.reason = reason


class Cancelled(TransportError):
    """A cancellable transport call found its :class:`~hicache_sdk.kit.cancel.CancelToken`
    cancelled before touching caller memory (reason ``"cancelled"``)."""

    def __init__(self, message: str = "cancelled at the deadline") -> None:
        super().__init__(message, reason="cancelled")


class ClearRefusedError(HiCacheError, RuntimeError):
    """``clear()`` refused: the key scheme cannot name a prefix that holds exactly this
    instance's objects (SGLang's raw names carry the model inside a name, and another
    model's names can start the same way). Removing by guess could delete pages that
    another model, namespace or deployment owns."""
