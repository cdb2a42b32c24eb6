"""Host-pool views over SGLang's own linker pool group (DSA and DeepSeek V4 models).

SGLang 0.5.23's view builder for linkers, ``resolve_hybrid_device_pool_group``
(``hybrid_cache/linker_pool_assembler.py``), knows the pools of DSA and DeepSeek V4 models:
it returns a ``DevicePoolGroup`` of ``DevicePoolEntry`` objects, one per physical device
pool, each with its ``name`` (the backend pool: ``kv``, ``indexer``, ``deepseek_v4_c4``,
``swa``, ...), the logical pool whose transfer supplies its keys and slots
(``indices_from_pool``: ``kv`` or ``swa``), its ``components`` (lists of tensors whose rows
are token slots or whole pages) and its ``get_page_buffer_meta``.

* :class:`PoolEntryView` presents one entry to the paged adapter as a ``layer_first`` host
  pool: a page is the entry's page segments in ``get_page_buffer_meta`` order (each
  component's buffers in turn), stored as one object; its slots are the source pool's
  slots, so a transfer's device indices are the view's host indices. The segments are
  computed from the entry's buffers and checked against the entry's own meta at
  construction.
* :class:`LogicalKVAnchor` is the ``kv`` pool of a group without a KV entry (DeepSeek V4: its
  compressed and SWA pools hold every byte): a pool without a buffer, as the HiCache path
  registers it, so the other pools alone decide a hit.

:func:`sglang_pool_group` asks SGLang's builder for the group; it is the one place here that
imports sglang (on call). The views read the attributes SGLang's entries define.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ...errors import ConfigError
from ...spec import PoolName, pool_name_str

__all__ = ["LogicalKVAnchor", "PoolEntryView", "group_views", "sglang_pool_group"]

_KV = PoolName.KV.value
_MLA_GEOMETRY = ("kv_lora_rank", "qk_rope_head_dim", "kv_cache_dim")


def _kind(name: str, device_pool: Any) -> str:
    if name == _KV and hasattr(device_pool, "kv_lora_rank"):
        return "mla"
    return "indexer" if "indexer" in name else "other"


class PoolEntryView:
    """A ``layer_first`` host-pool view over one entry of SGLang's ``DevicePoolGroup`` (see
    the module docs). ``components``: the entry's buffer lists, rows on dim 0;
    ``slots_per_row``: 1 when a row is a token slot, ``page_size`` when it is a whole page.
    ``ConfigError`` naming the pool for buffers it cannot address row by row."""

    layout = "layer_first"

    def __init__(
        self,
        name: str,
        components: Sequence[Sequence[torch.Tensor]],
        page_size: int,
        slots_per_row: int,
        *,
        kind: str = "other",
        geometry: dict[str, int] | None = None,
    ) -> None:
        self.name = name
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size <= 0:
            raise ConfigError(f"pool {name!r}: page_size must be a positive integer, got {page_size!r}")
        if slots_per_row not in (1, page_size):
            raise ConfigError(f"pool {name!r}: a row holds {slots_per_row} slots, not 1 or a page")
        self.components = [list(c) for c in components]
        tensors = [t for c in self.components for t in c]
        if (
            not self.components
            or not all(self.components)
            or not all(isinstance(t, torch.Tensor) for t in tensors)
        ):
            raise ConfigError(f"pool {name!r}: no buffers (each component needs a list of tensors)")
        devices = {t.device.type for t in tensors}
        if len(devices) != 1:
            raise ConfigError(f"pool {name!r}: buffers on several devices {sorted(devices)}")
        self.device = tensors[0].device
        if any(t.dim() < 1 or t.shape[0] == 0 or not t[0].is_contiguous() for t in tensors):
            raise ConfigError(f"pool {name!r}: a buffer has no rows, or rows that are not contiguous")
        self.page_size = page_size
        self.slots_per_row = slots_per_row
        rows_per_page = page_size // slots_per_row
        self.size = min(t.shape[0] for t in tensors) // rows_per_page * page_size
        if self.size < page_size:
            raise ConfigError(f"pool {name!r}: fewer rows than one page of {page_size} slots")
        dtypes = list(dict.fromkeys(t.dtype for t in tensors))
        self.dtype: Any = dtypes[0] if len(dtypes) == 1 else ",".join(str(d) for d in dtypes)
        self.hicache_pool_kind = kind
        self.geometry = dict(geometry or {})
        for attr, value in self.geometry.items():
            setattr(self, attr, value)
        self.layer_num = len(self.components[0])
        #: what the transport registers (every buffer)
        self.kv_buffer = tensors
        #: per buffer, its tensor (rows on dim 0), for the staging ring
        self.layers: list[tuple[torch.Tensor, ...]] = [(t,) for t in tensors]
        self._segments = [
            (t.data_ptr(), t.stride(0) * t.element_size(), t.nbytes // t.shape[0] * rows_per_page)
            for t in tensors
        ]

    @classmethod
    def from_entry(cls, entry: Any) -> PoolEntryView:
        """The view of SGLang's ``DevicePoolEntry`` ``entry``; ``ConfigError`` when its
        segments are not the entry's own ``get_page_buffer_meta``."""
        name = pool_name_str(entry.name)
        page_size = int(entry.page_size)
        components = [list(c) for c in entry.components]
        first = components[0][0] if components and components[0] else None
        meta = getattr(entry, "buffer_meta", None)
        if not isinstance(first, torch.Tensor) or not meta or first.shape[0] == 0:
            raise ConfigError(f"SGLang's pool entry {name!r} has no buffers")
        rows_per_page = int(meta[0][0][2]) // (first.nbytes // first.shape[0])
        if rows_per_page not in (1, page_size):
            raise ConfigError(f"SGLang's pool entry {name!r}: {rows_per_page} rows a page")
        pool = entry.device_pool
        kind = _kind(name, pool)
        geometry = {"layer_num": len(components[0])}
        if kind == "mla":
            geometry.update({a: int(getattr(pool, a)) for a in _MLA_GEOMETRY if hasattr(pool, a)})
        view = cls(name, components, page_size, page_size // rows_per_page, kind=kind, geometry=geometry)
        for page in sorted({0, view.size // page_size - 1}):
            slots = torch.arange(page * page_size, (page + 1) * page_size, dtype=torch.int64)
            theirs = entry.get_page_buffer_meta(slots)
            if [list(map(int, part)) for part in theirs] != [*view.get_page_buffer_meta(slots)]:
                raise ConfigError(
                    f"SGLang's pool entry {name!r}: its page segments are not its buffers' rows in order"
                )
        return view

    @property
    def is_cpu(self) -> bool:
        return bool(self.device.type == "cpu")

    def page_segment_sizes(self) -> list[int]:
        """Byte size of each segment of one page, in ``get_page_buffer_meta`` order."""
        return [nbytes for _, _, nbytes in self._segments]

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        """``(ptrs, sizes)`` of every page of ``indices`` (aligned contiguous runs of
        ``page_size`` slots), each page as every buffer's rows of that page, in order."""
        from ...hostpool.describe import page_starts

        ptrs: list[int] = []
        sizes: list[int] = []
        for s in page_starts(indices.to("cpu"), self.page_size, self.size, arg="indices"):
            row = s // self.slots_per_row
            for base, stride, nbytes in self._segments:
                ptrs.append(base + row * stride)
                sizes.append(nbytes)
        return ptrs, sizes

    def host_mirror(self, rows: int, pin: bool) -> PoolEntryView:
        """The same view over host tensors of ``rows`` slots (the staging ring's)."""

        def host(t: torch.Tensor) -> torch.Tensor:
            shape = (rows // self.slots_per_row, *t.shape[1:])
            return torch.zeros(shape, dtype=t.dtype, pin_memory=pin)

        return PoolEntryView(
            self.name,
            [[host(t) for t in c] for c in self.components],
            self.page_size,
            self.slots_per_row,
            kind=self.hicache_pool_kind,
            geometry=self.geometry,
        )


class LogicalKVAnchor:
    """The ``kv`` pool of a group whose pages live in other pools only: no buffer, no
    objects; the backend folds the other pools' hits alone (``page_size`` slots a page)."""

    layout = "layer_first"
    hicache_pool_kind = "other"
    kv_buffer = None
    is_cpu = True

    size = 0

    def __init__(self, page_size: int, device: torch.device) -> None:
        self.page_size = page_size
        self.device = device
        self.dtype = torch.uint8

    def get_page_buffer_meta(self, indices: torch.Tensor) -> None:
        return None


def sglang_pool_group(kvcache: Any, params: Any, components: Any, page_size: int) -> Any:
    """SGLang's own ``DevicePoolGroup`` for a model its builder serves and the public-buffer
    views do not (DSA: a ``DSATokenToKVPool``; DeepSeek V4: a ``DeepSeekV4TokenToKVPool``),
    else ``None``. ``ConfigError`` with SGLang's reason when its builder refuses the model
    (HiSparse DeepSeek V4, components it does not pair with the pool, ...)."""
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool

    served: tuple[type, ...] = (DSATokenToKVPool,)
    try:
        from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
    except ImportError:  # a build without DeepSeek V4
        pass
    else:
        served += (DeepSeekV4TokenToKVPool,)
    if not isinstance(kvcache, served):
        return None
    from sglang.srt.mem_cache.hybrid_cache.linker_pool_assembler import resolve_hybrid_device_pool_group

    names = sorted(str(getattr(c, "name", c)) for c in components)
    try:
        return resolve_hybrid_device_pool_group(
            kvcache=kvcache, page_size=page_size, params=params, components=set(components)
        )
    except (ValueError, AssertionError, NotImplementedError) as e:
        raise ConfigError(
            f"{type(kvcache).__name__} with components {names}: SGLang's pool-view builder "
            f"(resolve_hybrid_device_pool_group) refuses it: {e}"
        ) from e


def group_views(group: Any) -> dict[str, PoolEntryView]:
    """A view per entry of SGLang's ``DevicePoolGroup`` ``group``, by the entry's pool name
    (a plain string)."""
    return {pool_name_str(entry.name): PoolEntryView.from_entry(entry) for entry in group.entries}
