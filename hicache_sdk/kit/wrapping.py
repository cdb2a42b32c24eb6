"""``WrappingTransport``: the base of a transport that wraps another.

It takes the inner transport's declared attributes (``capabilities``, ``max_segments``,
``cancellable``, ``io_errors``, ``failures``) and passes ``health``, ``close`` and memory
registration through; a subclass overrides what it changes.
"""

from __future__ import annotations

from ..transport import Transport

__all__ = ["WrappingTransport"]


class WrappingTransport(Transport):
    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.capabilities = inner.capabilities  # type: ignore[misc]
        self.max_segments = inner.max_segments  # type: ignore[misc]
        self.cancellable = inner.cancellable  # type: ignore[misc]
        self.io_errors = inner.io_errors  # type: ignore[misc]
        self.failures = inner.failures

    @property
    def inner(self) -> Transport:
        return self._inner

    def health(self) -> bool:
        return self._inner.health()

    def close(self) -> None:
        self._inner.close()

    def register_memory(self, address: int, nbytes: int) -> None:
        self._inner.register_memory(address, nbytes)

    def unregister_memory(self, address: int, nbytes: int) -> None:
        self._inner.unregister_memory(address, nbytes)
