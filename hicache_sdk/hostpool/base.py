"""Shared machinery of the host (L2) pools: geometry checks, pinned buffers, the page free list.

The pools in this package are CPU tensors shaped exactly like SGLang 0.5.23's host pools
(``HostKVCache`` subclasses), so the adapter and the page-geometry bridge
(:mod:`hicache_sdk.hostpool.describe`) treat ours and SGLang's the same way.

Edge cases of the free list (:class:`HostPoolBase`):

* ``alloc(n)`` needs ``n`` to be a non-negative multiple of ``page_size``
  (``ValueError`` naming ``need_size`` otherwise); it returns ``None`` when fewer than ``n``
  slots are free, and an empty tensor for ``n == 0``. Pages come from a page-granular free
  list, so every page is ``page_size`` contiguous slots starting at a page-aligned slot;
  pages of one allocation need not be adjacent.
* ``free(indices)`` takes whole pages (the rules of :func:`page_starts`); freeing a slot
  that is not allocated (a double free) raises ``ValueError`` naming ``indices`` and
  changes nothing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import ClassVar

import torch

from hicache_sdk.hostpool.describe import page_starts

__all__ = [
    "BUFFER_ALIGN",
    "HostPoolBase",
    "check_positive_int",
    "coerce_flat_page",
    "dtype_name",
    "resolve_pin_memory",
]

#: Alignment (bytes) of every pool buffer's first byte: the page size / O_DIRECT unit.
BUFFER_ALIGN = 4096


def check_positive_int(value: object, name: str) -> int:
    """``value`` as an ``int`` if it is a positive integer (``bool`` excluded), else
    ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def coerce_flat_page(data_page: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``data_page`` reshaped to ``target``'s shape, for ``set_from_flat_data_page``.

    A page of the target's dtype must have the same element count; a ``uint8`` page (raw
    bytes, e.g. read from a file) must have the same byte count and is reinterpreted. Anything
    else raises ``ValueError`` naming ``data_page`` (no silent dtype conversion)."""
    if not isinstance(data_page, torch.Tensor):
        raise ValueError(f"data_page must be a torch.Tensor, got {type(data_page).__name__}")
    if data_page.dtype != target.dtype:
        if data_page.dtype != torch.uint8:
            raise ValueError(f"data_page has dtype {data_page.dtype}, expected {target.dtype} or uint8")
        nbytes = target.numel() * target.element_size()
        if data_page.numel() != nbytes:
            raise ValueError(f"data_page has {data_page.numel()} bytes, expected {nbytes}")
        data_page = data_page.contiguous().view(target.dtype)
    if data_page.numel() != target.numel():
        raise ValueError(f"data_page has {data_page.numel()} elements, expected {target.numel()}")
    return data_page.reshape(target.shape)


def resolve_pin_memory(pin_memory: bool | None) -> bool:
    """``None`` means "pin when CUDA is available". An explicit ``True`` without CUDA is a
    misconfiguration (``ValueError`` naming ``pin_memory``): page-locking needs a CUDA driver."""
    cuda = torch.cuda.is_available()
    if pin_memory is None:
        return cuda
    if not isinstance(pin_memory, bool):
        raise ValueError(f"pin_memory must be a bool or None, got {pin_memory!r}")
    if pin_memory and not cuda:
        raise ValueError("pin_memory=True needs CUDA, which is not available; pass None or False")
    return pin_memory


class HostPoolBase:
    """Common state of every host pool: ``size`` (token slots, padding page included),
    ``page_size``, ``page_num``, ``layout``, ``dtype``, ``pin_memory``, ``device`` and a
    thread-safe page free list.

    ``page_num = size // page_size + 1`` and then ``size = page_num * page_size``, as in
    SGLang: one page beyond the requested capacity is reserved (it is allocatable too).
    """

    #: Layouts a subclass accepts; checked by ``__init__``.
    supported_layouts: ClassVar[tuple[str, ...]] = ("page_first",)

    def __init__(
        self,
        *,
        size: int,
        page_size: int,
        layout: str,
        dtype: torch.dtype,
        pin_memory: bool | None,
    ) -> None:
        check_positive_int(size, "size")
        check_positive_int(page_size, "page_size")
        if layout not in self.supported_layouts:
            raise ValueError(
                f"layout must be one of {list(self.supported_layouts)} for {type(self).__name__}, "
                f"got {layout!r}"
            )
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
        self.page_size = page_size
        self.page_num = size // page_size + 1
        self.size = self.page_num * page_size
        self.layout = layout
        self.dtype = dtype
        self.pin_memory = resolve_pin_memory(pin_memory)
        self.device = "cpu"
        self.lock = threading.RLock()
        self.clear()

    # -- buffers ---------------------------------------------------------------------------

    def _new_buffer(self, dims: Sequence[int], dtype: torch.dtype | None = None) -> torch.Tensor:
        """A zero-filled contiguous CPU tensor whose data starts on a :data:`BUFFER_ALIGN`
        (4 KiB) boundary, page-locked when ``self.pin_memory``.

        The alignment lets a file backend read pages with ``O_DIRECT`` straight into
        the pool (it needs 4 KiB-aligned memory). It is made by over-allocating a byte
        tensor by ``BUFFER_ALIGN`` and viewing an aligned slice of it (the view keeps the
        allocation alive); CUDA's pinned allocator is page-aligned already, the check is
        the same. A 0-element buffer is fine."""
        dt = dtype or self.dtype
        shape = tuple(int(d) for d in dims)
        nbytes = math.prod(shape) * torch.empty((), dtype=dt).element_size()
        raw = torch.zeros(nbytes + BUFFER_ALIGN, dtype=torch.uint8, device="cpu", pin_memory=self.pin_memory)
        off = -int(raw.data_ptr()) % BUFFER_ALIGN
        return raw[off : off + nbytes].view(dt).view(shape)

    # -- the page surface every pool implements (SGLang's HostKVCache names) ----------------------

    def get_size_per_token(self) -> int:
        """Bytes of one token (slot) of this pool."""
        raise NotImplementedError

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        """The page starting at slot ``index``."""
        raise NotImplementedError

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        """A zero-filled buffer of one flat page."""
        raise NotImplementedError

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        """Copy a flat page into the page starting at slot ``index``."""
        raise NotImplementedError

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]] | None:
        """``(ptr_list, size_list)`` of the pages of ``indices``; ``None`` without a buffer."""
        raise NotImplementedError

    def get_page_buffer_element_size(self, split_factor: int = 1) -> int | None:
        """Byte size of one page's first zero-copy segment (SGLang's helper); ``None`` for a
        bufferless (logical) pool."""
        indices = torch.zeros(self.page_size, dtype=torch.int64)
        if split_factor != 1:
            split = getattr(self, "get_split_heads_page_buffer_meta", None)
            if split is None:
                raise ValueError(f"split_factor={split_factor} needs a page_head MHA pool")
            meta = split(indices, split_factor)
        else:
            meta = self.get_page_buffer_meta(indices)
        return int(meta[1][0]) if meta and meta[1] else None

    # -- free list -------------------------------------------------------------------------

    def clear(self) -> None:
        """Mark every slot free (buffer contents are left as they are)."""
        with self.lock:
            self._free_pages = torch.arange(self.page_num, dtype=torch.int64)
            self._released: list[torch.Tensor] = []
            self._num_released = 0
            self._page_used = torch.zeros(self.page_num, dtype=torch.bool)

    def available_size(self) -> int:
        """Free token slots."""
        with self.lock:
            return (len(self._free_pages) + self._num_released) * self.page_size

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """``need_size`` int64 slot indices (whole pages), or ``None`` when not enough are free."""
        if isinstance(need_size, bool) or not isinstance(need_size, int) or need_size < 0:
            raise ValueError(f"need_size must be a non-negative integer, got {need_size!r}")
        if need_size % self.page_size:
            raise ValueError(f"need_size must be a multiple of page_size={self.page_size}, got {need_size}")
        pages_needed = need_size // self.page_size
        with self.lock:
            if pages_needed > len(self._free_pages) + self._num_released:
                return None
            if pages_needed > len(self._free_pages):
                self._free_pages = torch.cat([self._free_pages, *self._released])
                self._released = []
                self._num_released = 0
            pages = self._free_pages[:pages_needed]
            self._free_pages = self._free_pages[pages_needed:]
            self._page_used[pages] = True
        offsets = torch.arange(self.page_size, dtype=torch.int64)
        return (pages[:, None] * self.page_size + offsets[None, :]).reshape(-1)

    def free(self, indices: torch.Tensor) -> int:
        """Return whole pages to the free list; the number of slots freed."""
        if isinstance(indices, torch.Tensor) and indices.device.type != "cpu":
            indices = indices.cpu()
        starts = page_starts(indices, self.page_size, self.size, arg="indices")
        if not starts:
            return 0
        pages = torch.tensor(starts, dtype=torch.int64) // self.page_size
        with self.lock:
            if len(torch.unique(pages)) != len(pages):
                raise ValueError("indices: a page appears more than once (double free)")
            used = self._page_used[pages]
            if not bool(used.all()):
                bad = (pages[~used] * self.page_size).tolist()
                raise ValueError(f"indices: double free, pages starting at {bad[:8]} are not allocated")
            self._page_used[pages] = False
            self._released.append(pages)
            self._num_released += len(pages)
        return len(starts) * self.page_size
