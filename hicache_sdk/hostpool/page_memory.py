"""Page memory of a host pool: where each page's bytes live.

* :func:`page_segments` returns each page's ``(address, nbytes)`` segments, in
  ``get_page_buffer_meta`` order, by arithmetic (bases and per-page strides probed once per
  pool from ``get_page_buffer_meta`` and cached) instead of a meta call per page.
* :func:`flat_page_view` gives a ``uint8`` view of a page whose flat bytes are contiguous.
* :func:`pool_buffers` lists the distinct memory regions of a pool (what a transport is asked
  to register once).

Duck typed on our pools and SGLang's alike; never imports sglang.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from hicache_sdk.hostpool.layout import PoolLayout

__all__ = ["flat_page_view", "has_page_segments", "linear_plan", "page_segments", "pool_buffers"]


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


def linear_plan(pool: Any, layout: PoolLayout) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(bases, strides)`` when segment ``j`` of every page ``p`` of ``pool`` lies at
    ``bases[j] + p * strides[j]`` with ``layout.segment_sizes[j]`` bytes (the adapter's
    column fast path computes a whole batch's addresses from them); ``None`` otherwise
    (no buffer, no zero-copy meta, irregular meta, or sizes that no longer match)."""
    if not layout.has_buffer:
        return None
    plan = _plan(pool)
    if not (plan.supported and plan.linear) or plan.sizes != layout.segment_sizes:
        return None
    return plan.bases, plan.strides


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


def pool_buffers(pool: Any) -> list[tuple[int, int]]:
    """The distinct ``(address, nbytes)`` regions of the pool's tensors (each tensor of
    ``get_hybrid_pool_buffer()`` when the pool has it, else its KV / indexer / Mamba
    buffers), empty ones and duplicates dropped, in order. A logical anchor has none."""
    get = getattr(pool, "get_hybrid_pool_buffer", None)
    tensors: list[Any] = []
    if callable(get):
        try:
            tensors = [t for t in (get() or []) if isinstance(t, torch.Tensor)]
        except (AttributeError, NotImplementedError, TypeError):
            tensors = []
    if not tensors:
        tensors = _buffers(pool)
    out: list[tuple[int, int]] = []
    for t in tensors:
        region = (int(t.data_ptr()), int(t.numel() * t.element_size()))
        if region[1] > 0 and region not in out:
            out.append(region)
    return out


def _buffers(pool: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for attr in ("kv_buffer", "index_k_with_scale_buffer", "temporal_buffer", "conv_buffer"):
        value = getattr(pool, attr, None)
        items = value if isinstance(value, (list, tuple)) else [value]
        out.extend(t for t in items if isinstance(t, torch.Tensor) and t.numel() > 0)
    return out
