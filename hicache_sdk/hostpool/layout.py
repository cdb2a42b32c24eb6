"""What the adapter and the key schemes know about a registered host pool.

:class:`PoolLayout` is read from a host pool object -- ours (:mod:`hicache_sdk.hostpool`)
or SGLang's own ``HostKVCache`` subclasses -- never from user config, so two deployments
whose bytes differ can never share objects.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

__all__ = ["PoolLayout"]


@dataclass(frozen=True)
class PoolLayout:
    """The byte geometry of one page of one host pool.

    * ``name``: the pool name (``"kv"``, ``"mamba"``, ...; a plain string).
    * ``kind``: ``"mha"``, ``"mla"``, ``"mamba"``, ``"swa"``, ``"indexer"`` or ``"other"``.
    * ``layout``: the host layout (``layer_first``, ``page_first``, ``page_first_direct``,
      ``page_head``; sidecars report their own).
    * ``dtype``: the element dtype name as torch prints it without ``torch.``
      (``"bfloat16"``).
    * ``page_size``: tokens (slots) per page of this pool (1 for Mamba).
    * ``segment_sizes``: byte size of each contiguous segment of one page, in
      ``get_page_buffer_meta`` order (MHA page-first: ``(k, v)``; MHA layer_first:
      ``(k0, v0, k1, v1, ...)``; MLA page-first: one; Mamba: temporal then conv states).
    * ``flat_order``: the permutation of segment indices whose concatenation equals the
      bytes of ``get_data_page(index, flat=True)`` (identity except MHA layer_first, where
      it is all K segments then all V segments). Objects store pages in this order.
    * ``geometry``: sorted ``(name, value)`` pairs that shape the bytes (layer_num,
      head_num, head_dim, v_head_dim, kv_lora_rank, ...).
    * ``rank_replicated``: every TP rank holds identical bytes (MLA, DSV4 compressed
      pools); ``False`` for rank-sharded pools (MHA, Mamba).
    * ``has_buffer``: ``False`` for a logical KV anchor (a host KV pool without a KV
      buffer, as in DeepSeek-V4): it has no bytes of its own.
    """

    name: str
    kind: str
    layout: str
    dtype: str
    page_size: int
    segment_sizes: tuple[int, ...]
    flat_order: tuple[int, ...]
    geometry: tuple[tuple[str, int], ...] = ()
    rank_replicated: bool = False
    has_buffer: bool = True

    @property
    def page_bytes(self) -> int:
        """Bytes of one page (the sum of its segments)."""
        return sum(self.segment_sizes)

    def fingerprint(self) -> str:
        """A stable hex digest of everything that shapes this pool's page bytes
        (kind, layout, dtype, page size, segments, geometry, replication)."""
        doc = {
            "kind": self.kind,
            "layout": self.layout,
            "dtype": self.dtype,
            "page_size": self.page_size,
            "segment_sizes": list(self.segment_sizes),
            "flat_order": list(self.flat_order),
            "geometry": [list(g) for g in self.geometry],
            "rank_replicated": self.rank_replicated,
        }
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()
