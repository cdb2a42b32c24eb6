"""Flat page tensors of SGLang's generic (non-zero-copy) path.

The generic controller path reads into ``pool.get_dummy_flat_data_page()`` and writes from
``pool.get_data_page(index, flat=True)``: one contiguous CPU tensor whose bytes are the
page's segments in ``PoolLayout.flat_order``. Objects store pages in that same order, so a
page written through v1 reads back through this path and vice versa.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, List, Optional, Protocol

from ..keys.scheme_base import KeyScheme
from ..transport import Segment
from .objects import ObjectIO, fold_pages
from .pools import PoolState, check_keys

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["LegacyHost", "LegacyPathMixin", "flat_batch", "flat_page_memory", "new_flat_page"]


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def flat_page_memory(state: PoolState, tensor: Any, arg: str) -> list[Segment]:
    """Validate a flat page tensor for ``state``'s pool and return its segment memory
    (``segment_sizes`` order).

    ``ValueError`` naming ``arg`` when ``tensor`` is not a torch tensor, not on the CPU,
    not contiguous, of another dtype than the pool's (its element dtype or its buffer's
    storage dtype), or not exactly one page of bytes.
    """
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{arg} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{arg} must be a CPU tensor, got device {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError(f"{arg} must be contiguous")
    allowed = {state.layout.dtype}
    buf = getattr(state.pool, "kv_buffer", None)
    if isinstance(buf, torch.Tensor):
        allowed.add(_dtype_name(buf.dtype))
    if _dtype_name(tensor.dtype) not in allowed:
        raise ValueError(f"{arg} has dtype {_dtype_name(tensor.dtype)}, the pool stores {state.layout.dtype}")
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes != state.layout.page_bytes:
        raise ValueError(f"{arg} holds {nbytes} bytes, one page is {state.layout.page_bytes} bytes")
    return state.flat_page_segments(int(tensor.data_ptr()))


def new_flat_page(state: PoolState) -> Any:
    """A fresh flat page buffer: the pool's ``get_dummy_flat_data_page()`` when it has
    one, else a zeroed tensor of the pool's dtype."""
    import torch

    maker = getattr(state.pool, "get_dummy_flat_data_page", None)
    if callable(maker):
        return maker()
    dtype = getattr(torch, state.layout.dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    return torch.zeros(state.layout.page_bytes // itemsize, dtype=dtype)


def flat_batch(
    scheme: KeyScheme, kv: PoolState, keys: Sequence[str], mems: Sequence[Sequence[Segment]]
) -> tuple[list[ObjectIO], list[int]]:
    """The objects of page ``keys[i]`` over flat page memory ``mems[i]`` under ``scheme``,
    and for each object the index of the key it belongs to."""
    objs: list[ObjectIO] = []
    owners: list[int] = []
    for i, key in enumerate(keys):
        page_objs = kv.objects(scheme, key, mems[i])
        objs.extend(page_objs)
        owners.extend([i] * len(page_objs))
    return objs, owners


class LegacyHost(Protocol):
    """What :class:`LegacyPathMixin` needs from the class it is mixed into
    (:class:`~hicache_sdk.paged.adapter.PagedStorage`)."""

    @property
    def scheme(self) -> KeyScheme: ...
    def _require_kv_bytes(self, op: str) -> PoolState: ...
    def _may_write(self, state: PoolState) -> bool: ...
    def _read(self, objs: Sequence[ObjectIO]) -> list[bool]: ...
    def _write(self, objs: Sequence[ObjectIO]) -> list[bool]: ...
    def _record(self, op: str, state: PoolState, results: Sequence[bool], t0: float) -> None: ...


def _get_pages(host: LegacyHost, kv: PoolState, keys: Sequence[str], targets: list[Any]) -> list[Any]:
    """Read KV pages ``keys`` into the flat page tensors ``targets`` (``None``: a new one);
    per key the filled tensor or ``None``."""
    mems = []
    for i, t in enumerate(targets):
        if t is None:
            targets[i] = t = new_flat_page(kv)
        mems.append(flat_page_memory(kv, t, f"target_locations[{i}]"))
    objs, owners = flat_batch(host.scheme, kv, keys, mems)
    t0 = time.perf_counter()
    results = fold_pages(len(keys), owners, host._read(objs))
    host._record("get", kv, results, t0)
    return [t if r else None for t, r in zip(targets, results)]


def _set_pages(host: LegacyHost, kv: PoolState, keys: Sequence[str], values: Sequence[Any]) -> bool:
    """Write the flat page tensors ``values`` under ``keys``; ``True`` when all are stored."""
    mems = [flat_page_memory(kv, v, f"values[{i}]") for i, v in enumerate(values)]
    if not host._may_write(kv):
        return True
    objs, owners = flat_batch(host.scheme, kv, keys, mems)
    t0 = time.perf_counter()
    results = fold_pages(len(keys), owners, host._write(objs))
    host._record("set", kv, results, t0)
    return all(results)


class LegacyPathMixin:
    """SGLang's generic path (``get``/``batch_get``/``set``/``batch_set``) for
    :class:`~hicache_sdk.paged.adapter.PagedStorage`, on top of its plumbing
    (:class:`LegacyHost`)."""

    def batch_get(
        self: LegacyHost,
        keys: List[str],
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> List[torch.Tensor | None]:
        """Read each KV page into ``target_locations[i]`` (a flat one-page CPU tensor as
        ``get_dummy_flat_data_page()`` gives; ``None`` allocates one). Per key: the filled
        tensor, or ``None`` on a miss. ``target_sizes`` is ignored."""
        kv = self._require_kv_bytes("batch_get")
        keys = check_keys(keys)
        if target_locations is None:
            targets: list[Any] = [None] * len(keys)
        elif isinstance(target_locations, (list, tuple)) and len(target_locations) == len(keys):
            targets = list(target_locations)
        else:
            raise ValueError("target_locations must be None or a list with one tensor per key")
        return _get_pages(self, kv, keys, targets)

    def get(
        self: LegacyHost,
        key: str,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> torch.Tensor | None:
        """One-key :meth:`batch_get`; ``ValueError`` names ``target_location``."""
        if not isinstance(key, str):
            raise ValueError(f"key must be a str, got {type(key).__name__}")
        kv = self._require_kv_bytes("get")
        if target_location is not None:
            flat_page_memory(kv, target_location, "target_location")
        got: torch.Tensor | None = _get_pages(self, kv, [key], [target_location])[0]
        return got

    def batch_set(
        self: LegacyHost,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        """Write each flat page tensor ``values[i]`` (as ``get_data_page(i, flat=True)``
        gives) under ``keys[i]``. ``True`` only when every page is now stored (existing
        pages count). Non-writer ranks of a rank-replicated KV store nothing (``True``)."""
        kv = self._require_kv_bytes("batch_set")
        keys = check_keys(keys)
        if values is None and target_locations is not None:
            values = target_locations
        if not isinstance(values, (list, tuple)) or len(values) != len(keys):
            raise ValueError("values must be a list with one flat page tensor per key")
        return _set_pages(self, kv, keys, values)

    def set(
        self: LegacyHost,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        """One-key :meth:`batch_set`; ``ValueError`` names ``value``."""
        if not isinstance(key, str):
            raise ValueError(f"key must be a str, got {type(key).__name__}")
        kv = self._require_kv_bytes("set")
        value = value if value is not None else target_location
        flat_page_memory(kv, value, "value")
        return _set_pages(self, kv, [key], [value])
