"""Pool factories shared by the host-pool tests (every pool type x layout we support)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch

from hicache_sdk.hostpool import IndexerHostPool, MambaHostPool, MHAHostPool, MLAHostPool, SWAHostPool

MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")


def _cases() -> dict[str, Callable[[], object]]:
    cases: dict[str, Callable[[], object]] = {}
    for layout in MHA_LAYOUTS:
        cases[f"mha-{layout}"] = lambda layout=layout: MHAHostPool(24, 4, 3, 2, 8, layout=layout)
        cases[f"mha-ps1-{layout}"] = lambda layout=layout: MHAHostPool(
            5, 1, 2, 1, 4, dtype=torch.float32, layout=layout
        )
    for layout in ("page_first", "page_first_direct"):
        cases[f"mha-asym-{layout}"] = lambda layout=layout: MHAHostPool(
            16, 4, 2, 2, 8, v_head_dim=4, dtype=torch.float16, layout=layout
        )
    cases["swa-page_first"] = lambda: SWAHostPool(16, 2, 2, 2, 4)
    for layout in MLA_LAYOUTS:
        cases[f"mla-{layout}"] = lambda layout=layout: MLAHostPool(24, 4, 3, 12, 4, layout=layout)
        cases[f"indexer-{layout}"] = lambda layout=layout: IndexerHostPool(24, 4, 2, 6, layout=layout)
    for layout in ("page_first", "page_first_direct"):
        cases[f"mamba-{layout}"] = lambda layout=layout: MambaHostPool(
            6,
            (2, 3),
            [(4,), (2, 2)],
            layer_num=2,
            dtype=torch.bfloat16,
            temporal_dtype=torch.float32,
            layout=layout,
        )
    cases["mamba-conv-only"] = lambda: MambaHostPool(4, (0,), [(3, 2)], layer_num=3, dtype=torch.float16)
    return cases


CASES = _cases()
SYMMETRIC = [k for k in CASES if "asym" not in k]


def pool_buffers(pool: object) -> list[torch.Tensor]:
    bufs: list[torch.Tensor] = []
    for attr in ("kv_buffer", "index_k_with_scale_buffer", "temporal_buffer", "conv_buffer"):
        value = getattr(pool, attr, None)
        items = value if isinstance(value, (list, tuple)) else [value]
        bufs += [t for t in items if isinstance(t, torch.Tensor) and t.numel() > 0]
    unique: dict[int, torch.Tensor] = {t.data_ptr(): t for t in bufs}
    return list(unique.values())


def fill_random(pool: object, seed: int = 0) -> None:
    """Fill every buffer with random bytes (distinct per byte position with high probability)."""
    gen = torch.Generator().manual_seed(seed)
    for buf in pool_buffers(pool):
        raw = buf.view(-1).view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen))


def read_bytes(address: int, nbytes: int) -> bytes:
    return ctypes.string_at(address, nbytes)


def tensor_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
