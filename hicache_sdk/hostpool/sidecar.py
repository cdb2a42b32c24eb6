"""Sidecar host pools: Mamba state, SWA window KV, DSA-style indexer keys.

* :class:`MambaHostPool` mirrors SGLang 0.5.23's ``MambaPoolHost``: ``page_size`` 1 (one
  state per slot), a temporal (SSM) state buffer ``(size, layers, 1, *temporal_shape)`` and one
  buffer per conv state ``(size, layers, 1, *conv_shape)``. ``get_page_buffer_meta`` yields
  ``[temporal, conv_0, conv_1, ...]`` per slot; a temporal state with 0 elements (conv-only
  models) is left out. A flat page is the ``uint8`` concatenation of those parts (a copy).
* :class:`SWAHostPool` is an MHA KV pool at the token page size (pool name ``"swa"``).
* :class:`IndexerHostPool` mirrors ``DSAIndexerPoolHost``: an ALL_PAGES sidecar sharing the KV
  indices, buffer ``index_k_with_scale_buffer`` of ``(page_num, layers, 1, page_size * index_dim)``
  (page-first family, one segment per page) or ``(layers, page_num, page_size * index_dim)``
  (``layer_first``; one segment per layer per page, an extension: SGLang has no zero-copy meta
  for that layout).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import ClassVar

import torch

from hicache_sdk.hostpool.base import HostPoolBase, check_positive_int, coerce_flat_page
from hicache_sdk.hostpool.mha import MHAHostPool

__all__ = ["IndexerHostPool", "MambaHostPool", "SWAHostPool"]


class SWAHostPool(MHAHostPool):
    """The sliding-window-attention sidecar: an MHA KV pool at the token page size,
    registered under pool name ``"swa"``. Same constructor and surface as :class:`MHAHostPool`."""


def _check_shape(shape: object, name: str) -> tuple[int, ...]:
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise ValueError(f"{name} must be a tuple of non-negative integers, got {shape!r}")
    return tuple(shape)


class MambaHostPool(HostPoolBase):
    """Host pool of Mamba (SSM) states, one state per slot (see the module docstring)."""

    supported_layouts: ClassVar[tuple[str, ...]] = ("page_first", "page_first_direct")

    def __init__(
        self,
        size: int,
        temporal_shape: tuple[int, ...],
        conv_shapes: Sequence[tuple[int, ...]],
        *,
        layer_num: int,
        dtype: torch.dtype = torch.bfloat16,
        temporal_dtype: torch.dtype | None = None,
        layout: str = "page_first",
        pin_memory: bool | None = None,
    ) -> None:
        self.temporal_state_shape = _check_shape(temporal_shape, "temporal_shape")
        if isinstance(conv_shapes, (str, bytes)) or not isinstance(conv_shapes, Sequence):
            raise ValueError(f"conv_shapes must be a sequence of shapes, got {conv_shapes!r}")
        self.conv_state_shapes = [_check_shape(s, f"conv_shapes[{i}]") for i, s in enumerate(conv_shapes)]
        self.num_mamba_layers = check_positive_int(layer_num, "layer_num")
        self.layer_num = self.num_mamba_layers
        if temporal_dtype is not None and not isinstance(temporal_dtype, torch.dtype):
            raise ValueError(f"temporal_dtype must be a torch.dtype or None, got {temporal_dtype!r}")
        self.conv_dtype = dtype
        self.temporal_dtype = temporal_dtype or dtype
        self.temporal_state_elem_size = math.prod(self.temporal_state_shape)
        self.conv_state_elem_sizes = [math.prod(s) for s in self.conv_state_shapes]
        super().__init__(size=size, page_size=1, layout=layout, dtype=dtype, pin_memory=pin_memory)
        self.size_per_token = self.get_size_per_token()
        L = self.num_mamba_layers
        self.temporal_buffer = self._state_buffer(
            (self.size, L, 1, *self.temporal_state_shape), self.temporal_dtype
        )
        self.conv_buffer = [
            self._state_buffer((self.size, L, 1, *s), self.conv_dtype) for s in self.conv_state_shapes
        ]
        self.kv_buffer = [b for b in (self.temporal_buffer, *self.conv_buffer) if b.numel() > 0]

    def _state_buffer(self, dims: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if math.prod(dims) == 0:
            return torch.empty(dims, dtype=dtype)
        return self._new_buffer(dims, dtype)

    def get_size_per_token(self) -> int:
        """Bytes of one slot's state (temporal and conv, all layers)."""
        conv = sum(n * self.conv_dtype.itemsize for n in self.conv_state_elem_sizes)
        temporal = self.temporal_state_elem_size * self.temporal_dtype.itemsize
        return (conv + temporal) * self.num_mamba_layers

    def get_ksize_per_token(self) -> int:
        """Same as :meth:`get_size_per_token`."""
        return self.get_size_per_token()

    def get_hybrid_pool_buffer(self) -> list[torch.Tensor]:
        """``[temporal_buffer, *conv_buffer]`` (what a zero-copy backend registers)."""
        return [self.temporal_buffer, *self.conv_buffer]

    def _page_parts(self, index: int) -> Iterator[torch.Tensor]:
        yield self.temporal_buffer[index]
        yield from (buf[index] for buf in self.conv_buffer)

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        """The slot's state as ``uint8`` bytes: temporal, then each conv state (a copy)."""
        index = int(index)
        return torch.cat([t.contiguous().view(torch.uint8).reshape(-1) for t in self._page_parts(index)])

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        """A zero-filled ``uint8`` page of ``size_per_token`` bytes."""
        return torch.zeros(self.size_per_token, dtype=torch.uint8, pin_memory=self.pin_memory)

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        """Copy a flat page (any dtype; read as bytes) into slot ``index``; ``ValueError`` naming
        ``data_page`` when its byte count is not ``size_per_token``."""
        if not isinstance(data_page, torch.Tensor):
            raise ValueError(f"data_page must be a torch.Tensor, got {type(data_page).__name__}")
        raw = data_page.contiguous().view(torch.uint8).reshape(-1)
        if raw.numel() != self.size_per_token:
            raise ValueError(f"data_page has {raw.numel()} bytes, expected {self.size_per_token}")
        offset = 0
        for part in self._page_parts(int(index)):
            n = part.numel() * part.element_size()
            part.copy_(coerce_flat_page(raw[offset : offset + n].clone(), part))
            offset += n

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        """``(ptr_list, size_list)``: per slot ``[temporal?, conv_0, ...]``."""
        L = self.num_mamba_layers
        parts: list[tuple[int, int]] = []
        if self.temporal_state_elem_size > 0:
            parts.append(
                (
                    self.temporal_buffer.data_ptr(),
                    L * self.temporal_state_elem_size * self.temporal_dtype.itemsize,
                )
            )
        for buf, n in zip(self.conv_buffer, self.conv_state_elem_sizes):
            parts.append((buf.data_ptr(), L * n * self.conv_dtype.itemsize))
        ptrs: list[int] = []
        sizes: list[int] = []
        for s in indices.tolist():
            for base, nbytes in parts:
                ptrs.append(base + int(s) * nbytes)
                sizes.append(nbytes)
        return ptrs, sizes


class IndexerHostPool(HostPoolBase):
    """Host pool of per-token indexer keys, sharing the KV pool's slot indices (see the
    module docstring). ``dtype`` is the stored element type (SGLang stores ``uint8``)."""

    supported_layouts: ClassVar[tuple[str, ...]] = ("layer_first", "page_first", "page_first_direct")

    def __init__(
        self,
        size: int,
        page_size: int,
        layer_num: int,
        index_dim: int,
        dtype: torch.dtype = torch.uint8,
        *,
        layout: str = "page_first",
        pin_memory: bool | None = None,
    ) -> None:
        self.layer_num = check_positive_int(layer_num, "layer_num")
        self.index_dim = check_positive_int(index_dim, "index_dim")
        super().__init__(size=size, page_size=page_size, layout=layout, dtype=dtype, pin_memory=pin_memory)
        self.indexer_dtype = dtype
        self.indexer_page_num = self.page_num
        self.indexer_page_stride_size = self.page_size * self.index_dim
        self.indexer_layout_dim = self.indexer_page_stride_size * self.layer_num
        self.size_per_token = self.get_size_per_token()
        if layout == "layer_first":
            dims: tuple[int, ...] = (self.layer_num, self.page_num, self.indexer_page_stride_size)
        else:
            dims = (self.page_num, self.layer_num, 1, self.indexer_page_stride_size)
        self.index_k_with_scale_buffer = self._new_buffer(dims)
        self.kv_buffer = self.index_k_with_scale_buffer

    def get_size_per_token(self) -> int:
        """Bytes of one token's indexer keys across all layers."""
        return self.index_dim * self.layer_num * self.dtype.itemsize

    def get_ksize_per_token(self) -> int:
        """Same as :meth:`get_size_per_token`."""
        return self.get_size_per_token()

    def get_hybrid_pool_buffer(self) -> list[torch.Tensor]:
        """``[index_k_with_scale_buffer]``."""
        return [self.index_k_with_scale_buffer]

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        """The page starting at slot ``index`` (a view; layer-major when flat)."""
        p = int(index) // self.page_size
        buf = self.index_k_with_scale_buffer
        page = buf[:, p : p + 1] if self.layout == "layer_first" else buf[p : p + 1]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        """A zero-filled flat page (``layer_num * page_size * index_dim`` elements)."""
        return torch.zeros(self.indexer_layout_dim, dtype=self.dtype, pin_memory=self.pin_memory)

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        """Copy a flat page into the page at slot ``index``."""
        target = self.get_data_page(index, flat=False)
        target.copy_(coerce_flat_page(data_page, target))

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        """One segment per page (page-first family) or one per layer per page (``layer_first``)."""
        if len(indices) % self.page_size:
            raise ValueError(
                f"indices: length {len(indices)} is not a multiple of page_size={self.page_size}"
            )
        isz = self.dtype.itemsize
        base = self.index_k_with_scale_buffer.data_ptr()
        stride = self.indexer_page_stride_size * isz
        ptrs: list[int] = []
        pages = [int(s) // self.page_size for s in indices[:: self.page_size].tolist()]
        if self.layout == "layer_first":
            for p in pages:
                ptrs += [base + (layer * self.page_num + p) * stride for layer in range(self.layer_num)]
            return ptrs, [stride] * len(ptrs)
        ptrs = [base + p * self.layer_num * stride for p in pages]
        return ptrs, [self.layer_num * stride] * len(ptrs)
