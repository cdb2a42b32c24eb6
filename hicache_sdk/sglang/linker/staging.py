"""The staging ring: host memory between a device KV pool the transport cannot address
(CUDA) and the store.

The ring is a host mirror of the device pool's per-layer buffers, ``2 * pages`` pages long
(pinned when the pool is on CUDA): the first half serves loads, the second offloads, so
the load and offload threads never share a slot. The backend registers the ring, not the
device pool, as its KV host pool (so a transport that registers memory, like Mooncake,
registers the ring once). Page bytes and identity are the device pool's: the mirror has
its geometry and dtype.

* Load: a batch is read into the ring ``pages`` pages at a time (whole reads); each chunk's
  layers are copied host to device on a copy stream; for the last chunk an event per layer
  is recorded after its copy, and layer ``l`` is completed once its event has fired.
* Offload: after the ``record_offload_ready`` events, each chunk is copied device to host
  into the ring, then written.

Buffers whose rows are whole pages (SGLang's pool group: an indexer, DeepSeek V4's
compressed pools) are copied a page row at a time. On CPU pools the copies are plain tensor
copies (used by the tests: ``"staging": true``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ...spec import PoolName, PoolTransfer
from .group import PoolEntryView
from .view import DeviceKVView, DeviceMambaView

__all__ = ["StagingRing"]


class _Mirror:
    """Host buffers shaped like the device pool's, with its geometry attributes."""

    def __init__(self, pool: Any, view: DeviceKVView, rows: int, pin: bool) -> None:
        def host(t: torch.Tensor) -> torch.Tensor:
            return torch.zeros((rows, *t.shape[1:]), dtype=t.dtype, pin_memory=pin)

        for attr in (
            "layer_num",
            "head_num",
            "head_dim",
            "v_head_dim",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "kv_cache_dim",
        ):
            if hasattr(view, attr):
                setattr(self, attr, getattr(view, attr))
        self.dtype = view.dtype
        if view.buffer_kind == "mha":
            self.k_buffer = [host(k) for k, _ in view.layers]
            self.v_buffer = [host(v) for _, v in view.layers]
        else:
            self.kv_buffer = [host(layer[0]) for layer in view.layers]
            self.kv_lora_rank = getattr(view, "kv_lora_rank", 0)


class StagingRing:
    """See the module docs. ``pages``: pages per half of the ring (>= 1); ``name``: the
    backend pool the ring is registered as (the KV pool, or the SWA or Mamba pool of a
    hybrid model)."""

    def __init__(
        self,
        pool: Any,
        view: DeviceKVView | DeviceMambaView | PoolEntryView,
        pages: int,
        name: Any = PoolName.KV,
    ) -> None:
        if pages < 1:
            raise ValueError(f"staging_pages must be >= 1, got {pages}")
        self.device_view = view
        self.name = name
        self.pages = pages
        self.page_size = view.page_size
        cuda = view.device.type == "cuda"
        rows = 2 * pages * view.page_size
        self.mirror: Any
        if isinstance(view, DeviceKVView):
            self.mirror = DeviceKVView(
                _Mirror(pool, view, rows, pin=cuda), view.page_size, kind=view.hicache_pool_kind
            )
        else:  # a Mamba state view (one slot a page), or a view of SGLang's pool group
            self.mirror = view.host_mirror(rows, pin=cuda)
        #: slots a buffer row holds: 1, or a page (buffers whose rows are pages)
        self.slots_per_row = getattr(view, "slots_per_row", 1)
        self.stream = torch.cuda.Stream(device=view.device) if cuda else None  # type: ignore[no-untyped-call]

    def _rows(self, half: int, n_pages: int) -> torch.Tensor:
        first = half * self.pages * self.page_size
        return torch.arange(first, first + n_pages * self.page_size, dtype=torch.int64)

    def _buffer_rows(self, slots: torch.Tensor, lo: int, hi: int) -> tuple[torch.Tensor, int, int]:
        """The device slots ``slots`` and ring slots ``lo..hi`` (whole pages) as buffer rows."""
        n = self.slots_per_row
        if n == 1:
            return slots, lo, hi
        return slots[::n] // n, lo // n, hi // n

    def _to_device(self, layer: int, dev_rows: torch.Tensor, lo: int, hi: int) -> None:
        """Ring rows ``lo..hi`` (contiguous, pinned) to the device rows ``dev_rows``."""
        dev_rows, lo, hi = self._buffer_rows(dev_rows, lo, hi)
        for d, s in zip(self.device_view.layers[layer], self.mirror.layers[layer]):
            d.index_copy_(0, dev_rows.to(d.device), s[lo:hi].to(d.device, non_blocking=True))

    def _to_host(self, layer: int, dev_rows: torch.Tensor, lo: int, hi: int) -> None:
        """The device rows ``dev_rows`` to ring rows ``lo..hi``."""
        dev_rows, lo, hi = self._buffer_rows(dev_rows, lo, hi)
        for d, s in zip(self.mirror.layers[layer], self.device_view.layers[layer]):
            d[lo:hi].copy_(s.index_select(0, dev_rows.to(s.device)))

    def load(
        self,
        store: Any,
        counter: Any,
        index: int,
        keys: Sequence[str],
        rows: torch.Tensor,
        *,
        complete: bool = True,
    ) -> None:
        """Read ``keys`` into the device rows ``rows`` through the ring, completing layers
        on ``counter`` (unless ``complete`` is false: the caller completes them); raises on
        a page that does not load."""
        n = len(keys)
        layers = len(self.device_view.layers)
        for first in range(0, n, self.pages):
            chunk = list(keys[first : first + self.pages])
            ring_rows = self._rows(0, len(chunk))
            got = store.batch_get_v2([PoolTransfer(name=self.name, host_indices=ring_rows, keys=chunk)])
            oks = [ok for pool in got.values() for ok in pool]
            if not oks or not all(oks):
                raise OSError(f"{oks.count(False)} of {len(chunk)} pages did not load")
            dev_rows = rows[first * self.page_size : (first + len(chunk)) * self.page_size]
            last = first + self.pages >= n
            events = []
            with torch.cuda.stream(self.stream) if self.stream is not None else _nothing():
                lo, hi = int(ring_rows[0]), int(ring_rows[-1]) + 1
                for layer in range(layers):
                    self._to_device(layer, dev_rows, lo, hi)
                    if self.stream is not None:
                        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
                        event.record(self.stream)
                        events.append(event)
            for layer in range(layers):
                if self.stream is not None:
                    events[layer].synchronize()
                if last and complete:
                    counter.complete(index, layer)

    def offload(self, store: Any, keys: Sequence[str], rows: torch.Tensor, extra_info: Any) -> bool:
        """Copy the device rows ``rows`` of ``keys`` to the ring and write them; ``True``
        when every page is stored."""
        n = len(keys)
        for first in range(0, n, self.pages):
            chunk = list(keys[first : first + self.pages])
            ring_rows = self._rows(1, len(chunk))
            dev_rows = rows[first * self.page_size : (first + len(chunk)) * self.page_size]
            lo, hi = int(ring_rows[0]), int(ring_rows[-1]) + 1
            for layer in range(len(self.device_view.layers)):
                self._to_host(layer, dev_rows, lo, hi)
            if self.stream is not None:
                torch.cuda.current_stream(self.device_view.device).synchronize()
            got = store.batch_set_v2(
                [PoolTransfer(name=self.name, host_indices=ring_rows, keys=chunk)], extra_info
            )
            oks = [ok for pool in got.values() for ok in pool]
            if not oks or not all(oks):
                return False
        return True


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
