"""Out-of-band access through a ``PagedStorage`` backend's own transport.

For a backend built on ``PagedStorage`` the objects below the adapter *are* the
out-of-band view: :class:`TransportRawObjects` reads, plants and deletes them through
``backend.raw_transport`` (never through the adapter, its integrity checks or its
resilience layer). A transport cannot list its objects, so :meth:`names` returns the
names this helper has seen *written* through that transport since it first looked
(it records every ``write`` of the transport object from then on) and still present.
An object whose size the transport reports as ``SIZE_UNKNOWN`` cannot be fetched whole:
``get`` then skips the calling test, with the reason.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest
import torch

from hicache_sdk import SIZE_UNKNOWN

__all__ = ["TransportRawObjects"]

_ATTR = "_hicache_conformance_written"


def _seg(t: torch.Tensor) -> list[tuple[int, int]]:
    return [(t.data_ptr(), t.numel())]


class TransportRawObjects:
    """The ``raw_pages`` protocol over ``backend.raw_transport`` (see the module docs)."""

    def _transport(self, backend: Any) -> Any:
        t = getattr(backend, "raw_transport", None)
        if t is None:
            raise ValueError(f"backend {type(backend).__name__} has no raw_transport (not PagedStorage)")
        if not hasattr(t, _ATTR):
            written: set[str] = set()
            lock = threading.Lock()
            inner_write = t.write

            def write(keys: Any, buffers: Any, *args: Any, **kwargs: Any) -> list[bool]:
                # every argument of the transport protocol passes through unchanged
                # (``cancel=`` of a cancellable transport, and whatever comes next)
                with lock:
                    written.update(keys)
                return inner_write(keys, buffers, *args, **kwargs)  # type: ignore[no-any-return]

            functools.update_wrapper(write, inner_write)

            t.write = write  # instance attribute: the adapter's calls go through it
            setattr(t, _ATTR, written)
        return t

    def names(self, backend: Any) -> list[str]:
        t = self._transport(backend)
        seen = sorted(getattr(t, _ATTR))
        sizes = t.exists(seen) if seen else []
        return [n for n, s in zip(seen, sizes) if s is not None]

    def get(self, backend: Any, name: str) -> bytes | None:
        t = self._transport(backend)
        (size,) = t.exists([name])
        if size is None:
            return None
        if size == SIZE_UNKNOWN:
            pytest.skip(f"{type(t).__name__}.exists reports SIZE_UNKNOWN: an object cannot be fetched whole")
        buf = torch.zeros(int(size), dtype=torch.uint8)
        (ok,) = t.read([name], [_seg(buf)])
        return bytes(buf.numpy()) if ok else None

    def put(self, backend: Any, name: str, data: bytes) -> None:
        t = self._transport(backend)
        t.delete([name])
        src = (
            torch.frombuffer(bytearray(data), dtype=torch.uint8)
            if data
            else torch.zeros(0, dtype=torch.uint8)
        )
        (ok,) = t.write([name], [_seg(src)])
        if not ok:
            raise AssertionError(f"planting {len(data)} bytes as {name!r} through the transport failed")

    def delete(self, backend: Any, name: str) -> None:
        self._transport(backend).delete([name])
