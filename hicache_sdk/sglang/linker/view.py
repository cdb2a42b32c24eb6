"""A host-pool view of a plain device KV pool, so the paged adapter can move its pages.

SGLang 0.5.23's own linker view builder (``resolve_hybrid_device_pool_group``) serves hybrid
models only: it refuses a plain MHA or MLA pool. :class:`DeviceKVView` is built from the
pool's public per-layer buffers instead (``k_buffer`` / ``v_buffer`` for MHA, ``kv_buffer``
for MLA) and looks like a ``layer_first`` host pool to :func:`~hicache_sdk.hostpool.describe.describe_pool`:

* a page is the per-layer segments ``k0, v0, k1, v1, ...`` (MHA) or ``l0, l1, ...`` (MLA),
  exactly what SGLang's ``layer_first`` host pools report, so the object bytes (all K layers,
  then all V layers) and the layout identity are the same as the HiCache path's for a
  ``layer_first`` host pool of the same model;
* slots are the device pool's rows (its padding page included), so a transfer's
  ``device_indices`` are the view's host indices.

Never imports sglang: it reads the attributes SGLang's device pools define.
"""

from __future__ import annotations

from typing import Any

import torch

from ...errors import ConfigError

__all__ = ["DeviceKVView", "DeviceMambaView", "layer_groups", "layer_ranges"]

#: Buffers a pool may hold beside its per-layer KV that the view would not move: their
#: pools are refused rather than restored without them.
_UNSERVED_BUFFERS = (
    "k_scale_buffer",
    "v_scale_buffer",
    "native_k_scale_buffer",
    "kv_scale_buffer",
    "index_k_with_scale_buffer",
)
_MHA_GEOMETRY = ("layer_num", "head_num", "head_dim", "v_head_dim")
_MLA_GEOMETRY = ("layer_num", "kv_lora_rank", "qk_rope_head_dim", "kv_cache_dim")


def _tensors(value: Any, what: str) -> list[torch.Tensor]:
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(t, torch.Tensor) for t in value)
    ):
        raise ConfigError(f"device KV pool: {what} must be a non-empty list of per-layer tensors")
    return list(value)


class DeviceKVView:
    """A ``layer_first`` host-pool view over a plain MHA or MLA device pool (see the module
    docs), or over one sub-pool of an SWA model (``kind="swa"``). ``ConfigError`` naming the
    pool for anything else."""

    layout = "layer_first"

    def __init__(self, pool: Any, page_size: int, *, kind: str | None = None) -> None:
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size <= 0:
            raise ConfigError(f"page_size must be a positive integer, got {page_size!r}")
        name = type(pool).__name__
        extra = [attr for attr in _UNSERVED_BUFFERS if getattr(pool, attr, None) is not None]
        if extra:
            raise ConfigError(
                f"{name} holds buffers beside its per-layer KV ({', '.join(extra)}: a scaled or "
                "quantized KV cache, or a DSA indexer): TransportLinker serves plain MHA and MLA pools"
            )
        if isinstance(getattr(pool, "k_buffer", None), (list, tuple)):
            self.hicache_pool_kind = "mha"
            k, v = _tensors(pool.k_buffer, "k_buffer"), _tensors(pool.v_buffer, "v_buffer")
            if len(k) != len(v):
                raise ConfigError(f"{name}: {len(k)} K layers but {len(v)} V layers")
            self.layers: list[tuple[torch.Tensor, ...]] = [(a, b) for a, b in zip(k, v)]
            attrs = _MHA_GEOMETRY
        elif isinstance(getattr(pool, "kv_buffer", None), (list, tuple)) and hasattr(pool, "kv_lora_rank"):
            self.hicache_pool_kind = "mla"
            self.layers = [(t,) for t in _tensors(pool.kv_buffer, "kv_buffer")]
            attrs = _MLA_GEOMETRY
        else:
            raise ConfigError(
                f"{name} is neither a plain MHA pool (k_buffer/v_buffer) nor a plain MLA pool "
                "(kv_buffer with kv_lora_rank): TransportLinker serves plain MHA and MLA models"
            )
        tensors = [t for layer in self.layers for t in layer]
        devices = {t.device.type for t in tensors}
        if len(devices) != 1:
            raise ConfigError(f"{name}: buffers on several devices {sorted(devices)}")
        self.device = tensors[0].device
        if not all(t.is_contiguous() for t in tensors):
            raise ConfigError(f"{name}: a per-layer buffer is not contiguous")
        rows = min(t.shape[0] for t in tensors)
        if rows < page_size:
            raise ConfigError(f"{name}: {rows} rows, fewer than one page of {page_size}")
        self.page_size = page_size
        self.size = rows // page_size * page_size
        self.dtype = pool.dtype
        for attr in attrs:
            value = getattr(pool, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, attr, value)
        #: ``"mha"`` / ``"mla"`` (from the buffers); ``kind`` renames it, e.g. ``"swa"`` for
        #: the SWA pool of an SWA model, as SGLang's host pools name that pool's kind.
        self.buffer_kind = self.hicache_pool_kind
        if kind is not None:
            self.hicache_pool_kind = kind
        self.layer_num = len(self.layers)
        #: what the transport registers (every per-layer buffer)
        self.kv_buffer = tensors
        self._row_bytes = [tuple(t.stride(0) * t.element_size() for t in layer) for layer in self.layers]
        self._bases = [tuple(t.data_ptr() for t in layer) for layer in self.layers]

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    def page_segment_sizes(self) -> list[int]:
        """Byte size of each segment of one page, in ``get_page_buffer_meta`` order."""
        return [rb * self.page_size for layer in self._row_bytes for rb in layer]

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        """``(ptrs, sizes)`` of every page of ``indices`` (aligned contiguous runs of
        ``page_size`` slots), each page as its per-layer segments."""
        from ...hostpool.describe import page_starts

        starts = page_starts(indices.to("cpu"), self.page_size, self.size, arg="indices")
        ptrs: list[int] = []
        sizes: list[int] = []
        for s in starts:
            for bases, row_bytes in zip(self._bases, self._row_bytes):
                for base, rb in zip(bases, row_bytes):
                    ptrs.append(base + s * rb)
                    sizes.append(rb * self.page_size)
        return ptrs, sizes


class DeviceMambaView:
    """A host-pool view over the state buffers of a device ``MambaPool`` (its
    ``mamba_cache.temporal`` and ``mamba_cache.conv``: ``(layers, slots, *state)`` tensors),
    as the backend's ``mamba`` pool: page size 1 (one state slot a page, as SGLang's
    ``MambaPoolHost``), ``hicache_pool_kind = "mamba"``.

    A page is one slot's per-layer state rows: the temporal state of every layer, then each
    conv state of every layer (a conv-only model's empty temporal state is left out). Their
    concatenation is the byte order of SGLang's ``page_first`` ``MambaPoolHost`` page, but
    the segmentation (one segment per layer and state, the device pool holds each layer
    apart) is not, so the layout identity differs. ``ConfigError`` for state buffers the
    view cannot address row by row (a per-layer slot row that is not contiguous: the
    envelope layout, or the CPU AMX conv layout)."""

    hicache_pool_kind = "mamba"
    buffer_kind = "mamba"
    layout = "layer_first"
    page_size = 1

    def __init__(self, temporal: torch.Tensor, conv: Any, *, name: str = "MambaPool") -> None:
        if not isinstance(temporal, torch.Tensor) or temporal.dim() < 2:
            raise ConfigError(f"{name}: the temporal state must be a (layers, slots, ...) tensor")
        convs = list(conv) if isinstance(conv, (list, tuple)) else []
        if not convs or not all(isinstance(t, torch.Tensor) and t.dim() >= 2 for t in convs):
            raise ConfigError(
                f"{name}: the conv states must be a non-empty list of (layers, slots, ...) tensors"
            )
        states = [t for t in (temporal, *convs) if t.numel() > 0]
        layers = {t.shape[0] for t in (temporal, *convs)}
        if len(layers) != 1:
            raise ConfigError(f"{name}: state tensors with different layer counts {sorted(layers)}")
        devices = {t.device.type for t in states}
        if len(devices) != 1:
            raise ConfigError(f"{name}: state buffers on several devices {sorted(devices)}")
        self.device = states[0].device
        self.num_mamba_layers = int(temporal.shape[0])
        if not all(t[layer].is_contiguous() for t in states for layer in range(self.num_mamba_layers)):
            raise ConfigError(
                f"{name}: a layer's state rows are not contiguous (an envelope or AMX state layout): "
                "TransportLinker serves Mamba pools with plain (layers, slots, ...) state tensors"
            )
        self.temporal, self.conv = temporal, convs
        self.size = min(t.shape[1] for t in states)
        self.temporal_state_shape = tuple(temporal.shape[2:])
        self.conv_state_shapes = [tuple(t.shape[2:]) for t in convs]
        self.temporal_dtype = temporal.dtype
        self.conv_dtype = convs[0].dtype
        self.dtype = self.conv_dtype
        #: per layer, that layer's state tensors (slots on dim 0), for the staging ring
        self.layers: list[tuple[torch.Tensor, ...]] = [
            tuple(t[layer] for t in states) for layer in range(self.num_mamba_layers)
        ]
        #: what the transport registers (every state tensor, whole)
        self.kv_buffer = states
        # segment order: state-major (temporal layers, then each conv state's layers)
        self._segments = [
            (t[layer].data_ptr(), t[layer].stride(0) * t.element_size())
            for t in states
            for layer in range(self.num_mamba_layers)
        ]

    @property
    def is_cpu(self) -> bool:
        return bool(self.device.type == "cpu")

    def page_segment_sizes(self) -> list[int]:
        return [rb for _, rb in self._segments]

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        """``(ptrs, sizes)`` of every slot of ``indices``, each as its per-layer state rows."""
        from ...hostpool.describe import page_starts

        ptrs: list[int] = []
        sizes: list[int] = []
        for s in page_starts(indices.to("cpu"), 1, self.size, arg="indices"):
            for base, rb in self._segments:
                ptrs.append(base + s * rb)
                sizes.append(rb)
        return ptrs, sizes

    def host_mirror(self, rows: int, pin: bool) -> DeviceMambaView:
        """The same view over host tensors of ``rows`` slots (the staging ring's)."""

        def host(t: torch.Tensor) -> torch.Tensor:
            return torch.zeros((t.shape[0], rows, *t.shape[2:]), dtype=t.dtype, pin_memory=pin)

        return DeviceMambaView(host(self.temporal), [host(t) for t in self.conv])


def layer_ranges(view: DeviceKVView) -> list[list[tuple[int, int]]]:
    """Per layer, the ``(offset, nbytes)`` byte ranges of that layer in a page object
    (objects hold all K layers, then all V layers: the flat order of a ``layer_first``
    page)."""
    per_layer = [[rb * view.page_size for rb in layer] for layer in view._row_bytes]
    n_parts = len(per_layer[0])
    out: list[list[tuple[int, int]]] = [[] for _ in per_layer]
    offset = 0
    for part in range(n_parts):
        for layer, sizes in enumerate(per_layer):
            out[layer].append((offset, sizes[part]))
            offset += sizes[part]
    return out


def layer_groups(n: int) -> list[range]:
    """The layers read together, in order: layer 0 alone, then groups that double (1, 2, 4,
    ...), so the first layers land early and a batch takes ``1 + ceil(log2(n))`` ranged reads
    per page instead of ``n``."""
    groups = [range(0, min(1, n))] if n else []
    start, size = 1, 1
    while start < n:
        groups.append(range(start, min(n, start + size)))
        start += size
        size *= 2
    return groups
