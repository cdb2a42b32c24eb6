"""MLA host (L2) KV pool, byte-compatible with SGLang 0.5.23's ``MLATokenToKVPoolHost``.

One latent "head" per token of ``kv_cache_dim = kv_lora_rank + qk_rope_head_dim`` elements.
``kv_buffer`` dims by layout:

* ``layer_first``: ``(layer_num, size, 1, kv_cache_dim)``
* ``page_first``: ``(size, layer_num, 1, kv_cache_dim)``
* ``page_first_direct``: ``(page_num, layer_num, page_size, 1, kv_cache_dim)``

``get_page_buffer_meta``: one pointer per page (page-first family) or ``layer_num`` pointers
per page (``layer_first``). ``logical=True`` builds the bufferless anchor (``kv_buffer is None``,
meta ``None``, empty flat pages), as SGLang's allocator-only MLA pool.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from hicache_sdk.hostpool.base import HostPoolBase, check_positive_int, coerce_flat_page

__all__ = ["MLAHostPool"]


class MLAHostPool(HostPoolBase):
    """Host KV pool of an MLA model (see the module docstring for buffer shapes)."""

    supported_layouts: ClassVar[tuple[str, ...]] = ("layer_first", "page_first", "page_first_direct")

    def __init__(
        self,
        size: int,
        page_size: int,
        layer_num: int,
        kv_lora_rank: int,
        qk_rope_head_dim: int,
        *,
        dtype: torch.dtype = torch.bfloat16,
        layout: str = "page_first",
        pin_memory: bool | None = None,
        logical: bool = False,
    ) -> None:
        self.layer_num = check_positive_int(layer_num, "layer_num")
        self.kv_lora_rank = check_positive_int(kv_lora_rank, "kv_lora_rank")
        if (
            isinstance(qk_rope_head_dim, bool)
            or not isinstance(qk_rope_head_dim, int)
            or qk_rope_head_dim < 0
        ):
            raise ValueError(f"qk_rope_head_dim must be a non-negative integer, got {qk_rope_head_dim!r}")
        self.qk_rope_head_dim = qk_rope_head_dim
        self.kv_cache_dim = kv_lora_rank + qk_rope_head_dim
        self.start_layer = 0
        self.end_layer = layer_num
        self.logical = bool(logical)
        super().__init__(size=size, page_size=page_size, layout=layout, dtype=dtype, pin_memory=pin_memory)
        self.token_stride_size = self.kv_cache_dim * self.dtype.itemsize
        self.layout_dim = self.token_stride_size * self.layer_num
        self.size_per_token = self.get_size_per_token()
        self.kv_buffer: torch.Tensor | None = None if self.logical else self._init_kv_buffer()

    def get_size_per_token(self) -> int:
        """Bytes of one token across all layers (0 for a logical pool)."""
        return 0 if self.logical else self.kv_cache_dim * self.dtype.itemsize * self.layer_num

    def get_ksize_per_token(self) -> int:
        """Same as :meth:`get_size_per_token` (MLA has no separate V)."""
        return self.get_size_per_token()

    def _init_kv_buffer(self) -> torch.Tensor:
        L, C = self.layer_num, self.kv_cache_dim
        dims = {
            "layer_first": (L, self.size, 1, C),
            "page_first": (self.size, L, 1, C),
            "page_first_direct": (self.page_num, L, self.page_size, 1, C),
        }[self.layout]
        return self._new_buffer(dims)

    def get_hybrid_pool_buffer(self) -> list[torch.Tensor]:
        """The host tensors a zero-copy backend registers: ``[kv_buffer]``."""
        return [] if self.kv_buffer is None else [self.kv_buffer]

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        """The page starting at slot ``index`` in the pool's own layout (a view; flattened
        when ``flat``; layer-major for ``layer_first``)."""
        if self.kv_buffer is None:
            return torch.empty(0, dtype=torch.uint8)
        index = int(index)
        if self.layout == "layer_first":
            page = self.kv_buffer[:, index : index + self.page_size]
        elif self.layout == "page_first":
            page = self.kv_buffer[index : index + self.page_size]
        else:
            p = index // self.page_size
            page = self.kv_buffer[p : p + 1]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        """A zero-filled flat page (``layer_num * page_size * kv_cache_dim`` elements)."""
        if self.kv_buffer is None:
            return torch.empty(0, dtype=torch.uint8)
        return torch.zeros(
            self.layer_num * self.page_size * self.kv_cache_dim, dtype=self.dtype, pin_memory=self.pin_memory
        )

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        """Copy a flat page (as ``get_data_page`` returns it) into the page at slot ``index``."""
        if self.kv_buffer is None:
            return
        target = self.get_data_page(index, flat=False)
        target.copy_(coerce_flat_page(data_page, target))

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]] | None:
        """``(ptr_list, size_list)``: one pointer per page (page-first family) or one per
        layer per page (``layer_first``). ``None`` for a logical pool."""
        if len(indices) % self.page_size:
            raise ValueError(
                f"indices: length {len(indices)} is not a multiple of page_size={self.page_size}"
            )
        if self.kv_buffer is None:
            return None
        row = self.kv_cache_dim * self.dtype.itemsize
        base = self.kv_buffer.data_ptr()
        ptrs: list[int] = []
        if self.layout == "layer_first":
            for s in indices[:: self.page_size].tolist():
                ptrs += [base + int(s) * row + layer * self.size * row for layer in range(self.layer_num)]
            return ptrs, [self.page_size * row] * len(ptrs)
        for s in indices[:: self.page_size].tolist():
            ptrs.append(base + int(s) * self.layer_num * row)
        return ptrs, [self.layer_num * self.page_size * row] * len(ptrs)
