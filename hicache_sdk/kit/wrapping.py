"""``WrappingTransport``: the base of a transport that wraps another.

It takes the inner transport's declared attributes (``capabilities``, ``max_segments``,
``cancellable``, ``io_errors``, ``failures``, ``cheap_ranges``) and passes ``health``,
``close``, ranged reads (``read_ranges``) and memory registration through; a subclass
overrides what it changes.

Features (:meth:`~hicache_sdk.transport.Transport.offers`): a wrapper offers what it
subclasses itself, and of its inner transport's features those in :attr:`passes_on`. The
default passes on :class:`~hicache_sdk.transport.DeadlineScoped` (a deadline bounds whatever
runs inside it, through any wrapper) and :class:`~hicache_sdk.transport.RangedReads` (ranged
reads pass through a wrapper anyway), and not :class:`~hicache_sdk.transport.SizedTransfer`
(a caller that used the inner transport's sized transfer would bypass this wrapper's
``read`` and ``write``). A wrapper that leaves ``read`` and ``write`` alone may add it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, TypeVar

from ..transport import DeadlineScoped, Range, RangedReads, Transport

__all__ = ["WrappingTransport"]

F = TypeVar("F")


class WrappingTransport(Transport):
    #: The features of the inner transport this wrapper offers as its own (module docs).
    passes_on: ClassVar[tuple[type, ...]] = (DeadlineScoped, RangedReads)
    ranges_from_inner: ClassVar[bool] = True

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.capabilities = inner.capabilities  # type: ignore[misc]
        self.max_segments = inner.max_segments  # type: ignore[misc]
        self.cancellable = inner.cancellable  # type: ignore[misc]
        self.io_errors = inner.io_errors  # type: ignore[misc]
        self.failures = inner.failures
        self.cheap_ranges = inner.cheap_ranges  # type: ignore[misc]

    @property
    def inner(self) -> Transport:
        return self._inner

    def io_error_types(self) -> tuple[type[BaseException], ...]:
        return tuple(dict.fromkeys((*self.io_errors, *self._inner.io_error_types())))

    def offers(self, feature: type[F]) -> F | None:
        own = super().offers(feature)
        if own is not None or feature not in self.passes_on:
            return own
        return self._inner.offers(feature)

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> bool:
        return self._inner.read_ranges(key, ranges)

    def health(self) -> bool:
        return self._inner.health()

    def close(self) -> None:
        self._inner.close()

    def register_memory(self, address: int, nbytes: int) -> None:
        self._inner.register_memory(address, nbytes)

    def unregister_memory(self, address: int, nbytes: int) -> None:
        self._inner.unregister_memory(address, nbytes)
