"""The bridge between a host pool and the paged adapter: page geometry and page addresses.

Everything here works by duck typing on our pools (:mod:`hicache_sdk.hostpool`) and on
SGLang's real host pools alike (``MHATokenToKVPoolHost``, ``MLATokenToKVPoolHost``,
``MambaPoolHost``, ``DSAIndexerPoolHost``, ``LogicalHostPool``, DeepSeek-V4 pools, ...):
it reads attributes SGLang defines and calls ``get_page_buffer_meta``; it never imports sglang.

* :func:`describe_pool` -> :class:`~hicache_sdk.hostpool.layout.PoolLayout`.
* :func:`page_starts` validates host indices and returns each page's start slot.
* page addresses (:func:`page_segments`, :func:`flat_page_view`, :func:`pool_buffers`) are
  in :mod:`hicache_sdk.hostpool.page_memory`, re-exported here.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from hicache_sdk.hostpool.layout import PoolLayout
from hicache_sdk.hostpool.page_memory import (
    _logical_page_size,
    _meta,
    flat_page_view,
    has_page_segments,
    page_segments,
    pool_buffers,
)
from hicache_sdk.spec import pool_name_str

__all__ = [
    "describe_pool",
    "flat_page_view",
    "has_page_segments",
    "page_segments",
    "page_starts",
    "pool_buffers",
]

_INT_DTYPES = (torch.int64, torch.int32)

# Integer attributes that shape a pool's page bytes, per kind (only attributes SGLang's pools
# carry too, so our pool and SGLang's for the same model describe identically).
_GEOMETRY_ATTRS: dict[str, tuple[str, ...]] = {
    "mha": ("layer_num", "head_num", "head_dim", "v_head_dim"),
    "swa": ("layer_num", "head_num", "head_dim", "v_head_dim"),
    "mla": ("layer_num", "kv_lora_rank", "qk_rope_head_dim", "kv_cache_dim"),
    "mamba": ("num_mamba_layers",),
    "indexer": ("layer_num", "indexer_page_stride_size"),
    "other": ("layer_num", "item_bytes", "state_page_bytes"),
}


# -- host indices -----------------------------------------------------------------------------


def page_starts(
    host_indices: torch.Tensor,
    page_size: int,
    pool_size: int | None = None,
    *,
    arg: str = "host_indices",
) -> list[int]:
    """The start slot of each page of ``host_indices``.

    ``host_indices`` must be a 1-D ``int64``/``int32`` CPU tensor whose length is a multiple
    of ``page_size``; page ``i`` is ``host_indices[i*page_size : (i+1)*page_size]`` and must be
    ``start, start+1, ..., start+page_size-1`` with ``start % page_size == 0`` and ``start >= 0``;
    with ``pool_size``, every slot must be ``< pool_size``. An empty tensor gives ``[]``.
    Each violation raises ``ValueError`` naming ``arg`` and what is wrong (``page_size`` /
    ``pool_size`` themselves are checked too). Vectorised: no Python loop over slots.
    """
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size <= 0:
        raise ValueError(f"page_size must be a positive integer, got {page_size!r}")
    if pool_size is not None and (
        isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 0
    ):
        raise ValueError(f"pool_size must be a non-negative integer or None, got {pool_size!r}")
    if not isinstance(host_indices, torch.Tensor):
        raise ValueError(f"{arg} must be a torch.Tensor, got {type(host_indices).__name__}")
    if host_indices.dtype not in _INT_DTYPES:
        raise ValueError(f"{arg} must have dtype int64 or int32, got {host_indices.dtype}")
    if host_indices.device.type != "cpu":
        raise ValueError(f"{arg} must be on the CPU, got device {host_indices.device}")
    if host_indices.dim() != 1:
        raise ValueError(f"{arg} must be 1-D, got shape {tuple(host_indices.shape)}")
    n = host_indices.numel()
    if n % page_size:
        raise ValueError(f"{arg} has length {n}, not a multiple of page_size={page_size}")
    if n == 0:
        return []
    # numpy on the tensor's own memory (no copy): a handful of vector ops, ~1 us overhead each
    pages = host_indices.numpy().reshape(-1, page_size)
    starts = pages[:, 0]
    low = int(starts.min())
    if low < 0:
        raise ValueError(f"{arg} has a negative slot index (min {low})")
    misaligned = starts % page_size
    if misaligned.any():
        first = int(np.flatnonzero(misaligned)[0])
        raise ValueError(
            f"{arg}: page {first} starts at slot {int(starts[first])}, not a multiple of page_size={page_size}"
        )
    if page_size > 1 and not np.array_equal(pages, starts[:, None] + _offsets(page_size)):
        broken = (pages != starts[:, None] + _offsets(page_size)).any(axis=1)
        first = int(np.flatnonzero(broken)[0])
        raise ValueError(f"{arg}: the slots of page {first} are not contiguous from its start")
    high = int(starts.max()) + page_size
    if pool_size is not None and high > pool_size:
        raise ValueError(f"{arg} has slots beyond the pool (max slot {high - 1}, pool size {pool_size})")
    result: list[int] = starts.tolist()
    return result


@functools.lru_cache(maxsize=64)
def _offsets(page_size: int) -> npt.NDArray[np.int64]:
    return np.arange(page_size, dtype=np.int64)


# -- describe ---------------------------------------------------------------------------------


def _kind(pool: Any, name: str) -> str:
    explicit = getattr(pool, "hicache_pool_kind", None)
    if isinstance(explicit, str):
        return explicit
    cls = type(pool).__name__.lower()
    if hasattr(pool, "temporal_buffer") or hasattr(pool, "num_mamba_layers") or "mamba" in cls:
        return "mamba"
    if hasattr(pool, "index_k_with_scale_buffer") or "indexer" in cls:
        return "indexer"
    if "swa" in cls or (name.endswith("swa") and hasattr(pool, "head_num")):
        return "swa"
    if hasattr(pool, "kv_lora_rank") or "mla" in cls:
        return "mla"
    if hasattr(pool, "head_num") and hasattr(pool, "head_dim"):
        return "mha"
    return "other"


def _dtype_str(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype(pool: Any, kind: str) -> str:
    if kind == "indexer" and getattr(pool, "indexer_dtype", None) is not None:
        return _dtype_str(pool.indexer_dtype)
    if kind == "mamba":
        conv = getattr(pool, "conv_dtype", pool.dtype)
        temporal = getattr(pool, "temporal_dtype", conv)
        if temporal != conv:
            return f"{_dtype_str(conv)},temporal={_dtype_str(temporal)}"
        return _dtype_str(conv)
    return _dtype_str(pool.dtype)


def _geometry(pool: Any, kind: str) -> tuple[tuple[str, int], ...]:
    geo: dict[str, int] = {}
    for attr in _GEOMETRY_ATTRS.get(kind, _GEOMETRY_ATTRS["other"]):
        value = getattr(pool, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            geo[attr] = value
    if kind != "mamba":
        return tuple(sorted(geo.items()))
    shapes: list[tuple[str, Any]] = [("temporal", getattr(pool, "temporal_state_shape", None))]
    shapes += [(f"conv_{i}", s) for i, s in enumerate(getattr(pool, "conv_state_shapes", None) or ())]
    for label, shape in shapes:
        if shape is None:
            continue
        dims = tuple(int(d) for d in shape)
        geo[f"{label}_ndim"] = len(dims)
        for j, d in enumerate(dims):
            geo[f"{label}_dim{j}"] = d
    return tuple(sorted(geo.items()))


def _has_buffer(pool: Any, kind: str) -> bool:
    if kind in ("mha", "mla", "swa", "other") and hasattr(pool, "kv_buffer") and pool.kv_buffer is None:
        return False
    return not (kind == "indexer" and getattr(pool, "index_k_with_scale_buffer", 1) is None)


def _flat_order(kind: str, layout: str, n_segments: int) -> tuple[int, ...]:
    if kind in ("mha", "swa") and layout == "layer_first" and n_segments % 2 == 0:
        # meta: k0, v0, k1, v1, ...; get_data_page(flat=True): all K layers, then all V layers
        return tuple(range(0, n_segments, 2)) + tuple(range(1, n_segments, 2))
    return tuple(range(n_segments))


def describe_pool(pool: Any, name: str, *, rank_replicated: bool | None = None) -> PoolLayout:
    """The :class:`PoolLayout` of ``pool`` registered under ``name`` (a string or PoolName).

    ``segment_sizes`` come from ``get_page_buffer_meta`` on page 0; when the pool has no
    zero-copy meta for its layout (it raises, as SGLang's Mamba/indexer pools do for
    ``layer_first``), the page is described as one segment of ``get_dummy_flat_data_page()``'s
    byte size, and :func:`has_page_segments` is ``False``. A bufferless pool (logical anchor:
    ``kv_buffer is None`` or meta ``None``) reports ``has_buffer=False`` and no segments.
    ``rank_replicated`` defaults to ``True`` for MLA and indexer pools, ``False`` otherwise.
    ``ValueError`` naming ``pool`` when it lacks ``page_size``/``layout``/``dtype``.
    """
    name = pool_name_str(name)
    for attr in ("page_size", "layout", "dtype", "get_page_buffer_meta"):
        if not hasattr(pool, attr):
            raise ValueError(f"pool has no {attr!r}: not a host pool ({type(pool).__name__})")
    kind = _kind(pool, name)
    layout = str(pool.layout)
    has_buffer = _has_buffer(pool, kind)
    sizes: tuple[int, ...] = ()
    if has_buffer:
        try:
            meta = _meta(pool, 0)
        except (ValueError, NotImplementedError, AssertionError):
            meta = ([0], [_dummy_page_nbytes(pool)])
        if meta is None:
            has_buffer = False
        else:
            sizes = tuple(meta[1])
    if rank_replicated is None:
        rank_replicated = kind in ("mla", "indexer")
    return PoolLayout(
        name=name,
        kind=kind,
        layout=layout,
        dtype=_dtype(pool, kind),
        page_size=_logical_page_size(pool),
        segment_sizes=sizes,
        flat_order=_flat_order(kind, layout, len(sizes)),
        geometry=_geometry(pool, kind),
        rank_replicated=bool(rank_replicated),
        has_buffer=has_buffer,
    )


def _dummy_page_nbytes(pool: Any) -> int:
    page = pool.get_dummy_flat_data_page()
    return int(page.numel() * page.element_size())
