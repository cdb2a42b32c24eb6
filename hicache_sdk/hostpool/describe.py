"""The bridge between a host pool and the paged adapter: page geometry and page addresses.

Everything here works by duck typing on our pools (:mod:`hicache_sdk.hostpool`) and on
SGLang's real host pools alike (``MHATokenToKVPoolHost``, ``MLATokenToKVPoolHost``,
``MambaPoolHost``, ``DSAIndexerPoolHost``, ``LogicalHostPool``, DeepSeek-V4 pools, ...):
it reads attributes SGLang defines and calls ``get_page_buffer_meta``; it never imports sglang.

* :func:`describe_pool` -> :class:`~hicache_sdk.hostpool.layout.PoolLayout`.
* :func:`page_starts` validates host indices and returns each page's start slot.
* :func:`page_segments` returns each page's ``(address, nbytes)`` segments, in
  ``get_page_buffer_meta`` order, by arithmetic (bases and per-page strides probed once per
  pool from ``get_page_buffer_meta`` and cached) instead of a meta call per page.
* :func:`flat_page_view` gives a ``uint8`` view of a page whose flat bytes are contiguous.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from hicache_sdk.hostpool.layout import PoolLayout
from hicache_sdk.spec import pool_name_str

__all__ = ["describe_pool", "flat_page_view", "has_page_segments", "page_segments", "page_starts"]

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


def _logical_page_size(pool: Any) -> int:
    value = getattr(pool, "logical_page_size", None)
    return int(value) if isinstance(value, int) and value > 0 else int(pool.page_size)


def _logical_size(pool: Any) -> int:
    value = getattr(pool, "logical_size", None)
    return int(value) if isinstance(value, int) and value > 0 else int(pool.size)


def _page_indices(pool: Any, page: int) -> torch.Tensor:
    lps = _logical_page_size(pool)
    return torch.arange(page * lps, (page + 1) * lps, dtype=torch.int64)


def _meta(pool: Any, page: int) -> tuple[list[int], list[int]] | None:
    meta = pool.get_page_buffer_meta(_page_indices(pool, page))
    if meta is None:
        return None
    ptrs, sizes = meta
    return [int(p) for p in ptrs], [int(s) for s in sizes]


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


# -- page segments ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """Segment j of page p is at ``bases[j] + p * strides[j]``; ``linear`` is False when the
    pool's meta is not of that form (then every call asks ``get_page_buffer_meta``)."""

    token: tuple[int, ...]
    sizes: tuple[int, ...]
    bases: tuple[int, ...]
    strides: tuple[int, ...]
    linear: bool
    supported: bool

    @property
    def np_bases(self) -> npt.NDArray[np.int64]:
        return np.asarray(self.bases, dtype=np.int64)

    @property
    def np_strides(self) -> npt.NDArray[np.int64]:
        return np.asarray(self.strides, dtype=np.int64)


_plans: weakref.WeakKeyDictionary[Any, _Plan] = weakref.WeakKeyDictionary()
_plans_lock = threading.Lock()


def _buffer_token(pool: Any) -> tuple[int, ...]:
    """Data pointers of the pool's buffers: a cached plan is reused only while they hold."""
    out: list[int] = []
    for attr in ("kv_buffer", "index_k_with_scale_buffer", "temporal_buffer"):
        value = getattr(pool, attr, None)
        items = value if isinstance(value, (list, tuple)) else [value]
        out.extend(t.data_ptr() for t in items if isinstance(t, torch.Tensor))
    return tuple(out)


def _probe(pool: Any, token: tuple[int, ...]) -> _Plan:
    try:
        first = _meta(pool, 0)
    except (ValueError, NotImplementedError, AssertionError):
        first = None
    if first is None:
        return _Plan(token, (), (), (), False, False)
    bases, sizes = tuple(first[0]), tuple(first[1])
    n_pages = _logical_size(pool) // _logical_page_size(pool)
    if n_pages < 2:
        return _Plan(token, sizes, bases, (0,) * len(bases), True, True)
    last_page = n_pages - 1
    try:
        second, last = _meta(pool, 1), _meta(pool, last_page)
    except (ValueError, NotImplementedError, AssertionError, IndexError):
        second = last = None
    linear = second is not None and last is not None and tuple(second[1]) == sizes == tuple(last[1])
    strides: tuple[int, ...] = ()
    if linear and second is not None and last is not None:
        strides = tuple(b1 - b0 for b0, b1 in zip(bases, second[0]))
        linear = len(second[0]) == len(bases) and all(
            b + last_page * s == x for b, s, x in zip(bases, strides, last[0])
        )
    return _Plan(token, sizes, bases, strides, linear, True)


def _plan(pool: Any) -> _Plan:
    token = _buffer_token(pool)
    try:
        with _plans_lock:
            plan = _plans.get(pool)
    except TypeError:  # not weak-referenceable: probe every time
        return _probe(pool, token)
    if plan is not None and plan.token == token:
        return plan
    plan = _probe(pool, token)
    with _plans_lock:
        _plans[pool] = plan
    return plan


def has_page_segments(pool: Any) -> bool:
    """Whether :func:`page_segments` works for ``pool`` (it has zero-copy meta for its layout)."""
    return _plan(pool).supported


def page_segments(pool: Any, layout: PoolLayout, starts: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Per page start slot in ``starts`` (validated ones, from :func:`page_starts`), the page's
    ``(address, nbytes)`` segments in ``get_page_buffer_meta`` order; equal to what
    ``get_page_buffer_meta`` returns for those pages, at a fraction of the cost.

    ``ValueError`` naming ``pool`` when it has no buffer or no zero-copy meta for its layout
    (use ``get_data_page``/``set_from_flat_data_page`` then), or when its segment sizes no
    longer match ``layout``. An empty ``starts`` gives ``[]``.
    """
    if not layout.has_buffer:
        raise ValueError(f"pool {layout.name!r} has no buffer (logical anchor): it has no page segments")
    plan = _plan(pool)
    if not plan.supported:
        raise ValueError(f"pool {layout.name!r} has no zero-copy page segments for layout {layout.layout!r}")
    if plan.sizes != layout.segment_sizes:
        raise ValueError(
            f"pool {layout.name!r}: segment sizes {plan.sizes} differ from layout {layout.segment_sizes}"
        )
    if not starts:
        return []
    if not plan.linear:
        lps = layout.page_size
        out: list[list[tuple[int, int]]] = []
        for s in starts:
            meta = _meta(pool, int(s) // lps)
            if meta is None:
                raise ValueError(f"pool {layout.name!r} returned no page meta for slot {s}")
            out.append(list(zip(meta[0], meta[1])))
        return out
    lps = layout.page_size
    pages = [s // lps for s in starts]
    if len(plan.sizes) == 1:
        b, st, n = plan.bases[0], plan.strides[0], plan.sizes[0]
        return [[(b + p * st, n)] for p in pages]
    if len(plan.sizes) == 2:
        b0, b1 = plan.bases
        s0, s1 = plan.strides
        n0, n1 = plan.sizes
        return [[(b0 + p * s0, n0), (b1 + p * s1, n1)] for p in pages]
    rows = (np.asarray(pages, dtype=np.int64)[:, None] * plan.np_strides + plan.np_bases).tolist()
    sizes = plan.sizes
    return [list(zip(row, sizes)) for row in rows]


def flat_page_view(pool: Any, layout: PoolLayout, start: int) -> torch.Tensor | None:
    """A ``uint8`` view of the flat bytes of the page at slot ``start`` when they are one
    contiguous run of one of the pool's buffers (segments adjacent in ``flat_order``), else
    ``None`` (also for bufferless pools and pools without zero-copy meta)."""
    if not layout.has_buffer or not has_page_segments(pool):
        return None
    segs = page_segments(pool, layout, [start])[0]
    ordered = [segs[j] for j in layout.flat_order]
    addr, total = ordered[0][0], 0
    for a, n in ordered:
        if a != addr + total:
            return None
        total += n
    for buf in _buffers(pool):
        if not buf.is_contiguous():
            continue
        lo = buf.data_ptr()
        nbytes = buf.numel() * buf.element_size()
        if lo <= addr and addr + total <= lo + nbytes:
            raw = buf.view(-1).view(torch.uint8)
            return raw[addr - lo : addr - lo + total]
    return None


def _buffers(pool: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for attr in ("kv_buffer", "index_k_with_scale_buffer", "temporal_buffer", "conv_buffer"):
        value = getattr(pool, attr, None)
        items = value if isinstance(value, (list, tuple)) else [value]
        out.extend(t for t in items if isinstance(t, torch.Tensor) and t.numel() > 0)
    return out
