"""MHA host (L2) KV pool, byte-compatible with SGLang 0.5.23's ``MHATokenToKVPoolHost``.

``kv_buffer`` dims by layout (index 0 = K, 1 = V):

* ``layer_first``: ``(2, layer_num, size, head_num, head_dim)``
* ``page_first``: ``(2, size, layer_num, head_num, head_dim)``
* ``page_first_direct``: ``(2, page_num, layer_num, page_size, head_num, head_dim)``
* ``page_head``: ``(2, page_num, head_num, page_size, layer_num, head_dim)``

When ``v_head_dim != head_dim`` the pool is *asymmetric* (SGLang's
``AsymmetricMHATokenToKVPoolHost``): ``kv_buffer`` is the pair ``(k_buffer, v_buffer)`` with
``(size, layer_num, head_num, dim)`` (``page_first``) or
``(page_num, layer_num, page_size, head_num, dim)`` (``page_first_direct``) each; no other layout
is accepted and the flat-page helpers raise ``NotImplementedError`` (as in SGLang).

``logical=True`` builds a pool without any buffer (``kv_buffer is None``), the KV anchor of
DeepSeek-V4: slots are allocated as usual, ``get_page_buffer_meta`` returns ``None`` and a
flat page is an empty ``uint8`` tensor.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from hicache_sdk.hostpool.base import HostPoolBase, check_positive_int, coerce_flat_page

__all__ = ["MHAHostPool"]


class MHAHostPool(HostPoolBase):
    """Host KV pool of an MHA model (see the module docstring for buffer shapes)."""

    supported_layouts: ClassVar[tuple[str, ...]] = (
        "layer_first",
        "page_first",
        "page_first_direct",
        "page_head",
    )
    _asymmetric_layouts: ClassVar[tuple[str, ...]] = ("page_first", "page_first_direct")

    def __init__(
        self,
        size: int,
        page_size: int,
        layer_num: int,
        head_num: int,
        head_dim: int,
        *,
        v_head_dim: int | None = None,
        dtype: torch.dtype = torch.bfloat16,
        layout: str = "page_first",
        pin_memory: bool | None = None,
        logical: bool = False,
    ) -> None:
        self.layer_num = check_positive_int(layer_num, "layer_num")
        self.head_num = check_positive_int(head_num, "head_num")
        self.head_dim = check_positive_int(head_dim, "head_dim")
        self.v_head_dim = head_dim if v_head_dim is None else check_positive_int(v_head_dim, "v_head_dim")
        self.start_layer = 0
        self.end_layer = layer_num
        self.logical = bool(logical)
        self.asymmetric = self.v_head_dim != self.head_dim
        if self.asymmetric and layout not in self._asymmetric_layouts:
            raise ValueError(
                f"layout must be one of {list(self._asymmetric_layouts)} when v_head_dim != head_dim, "
                f"got {layout!r}"
            )
        super().__init__(size=size, page_size=page_size, layout=layout, dtype=dtype, pin_memory=pin_memory)
        self.size_per_token = self.get_size_per_token()
        self.token_stride_size = self.head_num * self.head_dim * self.dtype.itemsize
        self.layout_dim = self.token_stride_size * self.layer_num
        self.kv_buffer: Any = None if self.logical else self._init_kv_buffer()

    # -- geometry ---------------------------------------------------------------------------

    def get_size_per_token(self) -> int:
        """Bytes of one token across all layers, K and V (0 for a logical pool)."""
        if self.logical:
            return 0
        return (self.head_dim + self.v_head_dim) * self.head_num * self.layer_num * self.dtype.itemsize

    def get_ksize_per_token(self) -> int:
        """Bytes of one token's K across all layers (half of the total when symmetric)."""
        if self.logical:
            return 0
        return self.head_dim * self.head_num * self.layer_num * self.dtype.itemsize

    def _init_kv_buffer(self) -> Any:
        L, H, D, P = self.layer_num, self.head_num, self.head_dim, self.page_size
        if self.asymmetric:
            if self.layout == "page_first":
                return (
                    self._new_buffer((self.size, L, H, D)),
                    self._new_buffer((self.size, L, H, self.v_head_dim)),
                )
            return (
                self._new_buffer((self.page_num, L, P, H, D)),
                self._new_buffer((self.page_num, L, P, H, self.v_head_dim)),
            )
        dims = {
            "layer_first": (2, L, self.size, H, D),
            "page_first": (2, self.size, L, H, D),
            "page_first_direct": (2, self.page_num, L, P, H, D),
            "page_head": (2, self.page_num, H, P, L, D),
        }[self.layout]
        return self._new_buffer(dims)

    @property
    def k_buffer(self) -> torch.Tensor:
        """The K half of ``kv_buffer`` (``kv_buffer[0]``)."""
        if self.kv_buffer is None:
            raise AttributeError("a logical pool has no k_buffer")
        return self.kv_buffer[0]  # type: ignore[no-any-return]

    @property
    def v_buffer(self) -> torch.Tensor:
        """The V half of ``kv_buffer`` (``kv_buffer[1]``)."""
        if self.kv_buffer is None:
            raise AttributeError("a logical pool has no v_buffer")
        return self.kv_buffer[1]  # type: ignore[no-any-return]

    def get_hybrid_pool_buffer(self) -> list[torch.Tensor]:
        """The host tensors a zero-copy backend registers: ``[k_buffer, v_buffer]``."""
        return [] if self.kv_buffer is None else [self.k_buffer, self.v_buffer]

    # -- flat pages -------------------------------------------------------------------------

    def _check_flat_supported(self) -> None:
        if self.asymmetric:
            raise NotImplementedError(
                "pools with head_dim != v_head_dim have no flat-page interface (as in SGLang); "
                "use zero-copy page segments"
            )

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        """The page starting at slot ``index`` in the pool's own layout (a view; flattened
        when ``flat``). For ``layer_first`` the flat order is all K layers, then all V layers."""
        self._check_flat_supported()
        if self.kv_buffer is None:
            return torch.empty(0, dtype=torch.uint8)
        index = int(index)
        buf: torch.Tensor = self.kv_buffer
        if self.layout == "layer_first":
            page = buf[:, :, index : index + self.page_size]
        elif self.layout == "page_first":
            page = buf[:, index : index + self.page_size]
        else:
            p = index // self.page_size
            page = buf[:, p : p + 1]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        """A zero-filled flat page (``2 * layer_num * page_size * head_num * head_dim`` elements)."""
        self._check_flat_supported()
        if self.kv_buffer is None:
            return torch.empty(0, dtype=torch.uint8)
        return torch.zeros(
            2 * self.layer_num * self.page_size * self.head_num * self.head_dim,
            dtype=self.dtype,
            pin_memory=self.pin_memory,
        )

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        """Copy a flat page (as ``get_data_page`` returns it) into the page at slot ``index``."""
        self._check_flat_supported()
        if self.kv_buffer is None:
            return
        target = self.get_data_page(index, flat=False)
        target.copy_(coerce_flat_page(data_page, target))

    # -- zero-copy meta ---------------------------------------------------------------------

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]] | None:
        """``(ptr_list, size_list)`` per page of ``indices`` (whole pages; page i starts at
        ``indices[i * page_size]``): page-first family ``[k, v]`` per page, ``layer_first``
        ``[k0, v0, k1, v1, ...]`` per page. ``None`` for a logical pool."""
        if len(indices) % self.page_size:
            raise ValueError(
                f"indices: length {len(indices)} is not a multiple of page_size={self.page_size}"
            )
        if self.kv_buffer is None:
            return None
        isz = self.dtype.itemsize
        starts = [int(x) for x in indices[:: self.page_size].tolist()]
        ptrs: list[int] = []
        sizes: list[int] = []
        if self.asymmetric:
            k_base, v_base = self.k_buffer.data_ptr(), self.v_buffer.data_ptr()
            k_tok = self.layer_num * self.head_num * self.head_dim * isz
            v_tok = self.layer_num * self.head_num * self.v_head_dim * isz
            for s in starts:
                ptrs += [k_base + s * k_tok, v_base + s * v_tok]
                sizes += [k_tok * self.page_size, v_tok * self.page_size]
            return ptrs, sizes
        base = self.kv_buffer.data_ptr()
        row = self.head_num * self.head_dim * isz
        v_offset = self.layer_num * self.size * row
        if self.layout == "layer_first":
            for s in starts:
                for layer in range(self.layer_num):
                    k = base + s * row + layer * self.size * row
                    ptrs += [k, k + v_offset]
            sizes = [self.page_size * row] * len(ptrs)
        else:
            for s in starts:
                k = base + s * self.layer_num * row
                ptrs += [k, k + v_offset]
            sizes = [self.layer_num * self.page_size * row] * len(ptrs)
        return ptrs, sizes

    def get_split_heads_page_buffer_meta(
        self, indices: torch.Tensor, split_factor: int
    ) -> tuple[list[int], list[int]]:
        """``page_head`` only: ``2 * split_factor`` pointers per page, a K/V pair per head group."""
        if self.layout != "page_head" or self.kv_buffer is None:
            raise ValueError("get_split_heads_page_buffer_meta needs a page_head pool with a buffer")
        check_positive_int(split_factor, "split_factor")
        if self.head_num % split_factor:
            raise ValueError(f"split_factor={split_factor} does not divide head_num={self.head_num}")
        if len(indices) % self.page_size:
            raise ValueError(
                f"indices: length {len(indices)} is not a multiple of page_size={self.page_size}"
            )
        isz = self.dtype.itemsize
        base = self.kv_buffer.data_ptr()
        v_offset = self.layer_num * self.size * self.head_num * self.head_dim * isz
        group = self.head_num // split_factor
        head_bytes = self.page_size * self.layer_num * self.head_dim * isz
        ptrs: list[int] = []
        for s in indices[:: self.page_size].tolist():
            page_base = base + int(s) * self.layer_num * self.head_num * self.head_dim * isz
            for head in range(0, self.head_num, group):
                k = page_base + head * head_bytes
                ptrs += [k, k + v_offset]
        return ptrs, [group * head_bytes] * len(ptrs)
