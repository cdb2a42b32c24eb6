"""SGLang 0.5.23's own host pools, built on CPU the way its pool assembler builds them.

SGLang constructs ``MHATokenToKVPoolHost`` / ``MLATokenToKVPoolHost`` from a
``MHABufferInfo`` / ``MLABufferInfo`` describing the device KV buffers (per-layer tensors
and their pointer tables); the host pool reads only geometry, dtype and pointers from
them, so small CPU tensors stand in for the device buffers here. The SWA pool of a
hybrid-SWA model is the same ``MHATokenToKVPoolHost`` over the sliding-window layers
(``build_kv_host_pool`` on the SWA device pool). SGLang's DSA indexer pool needs a DSA
device pool, which cannot be built without a GPU model; the suite keeps its own indexer
pool and says so (:func:`availability`).

Only imported when SGLang is installed; :func:`availability` says whether its pool
modules import here (a CPU machine without ``triton`` cannot import them unless a
stand-in is installed first), and why not.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

__all__ = ["availability", "sglang_version", "mha_pool", "mla_pool", "swa_pool"]

_MODULES = (
    "sglang.srt.mem_cache.device_pool_info",
    "sglang.srt.mem_cache.pool_host.mha",
    "sglang.srt.mem_cache.pool_host.mla",
)
_state: dict[str, Any] = {}


def sglang_version() -> str | None:
    """The installed SGLang's version, or ``None`` when SGLang is not installed."""
    try:
        from importlib import metadata

        return metadata.version("sglang")
    except Exception:
        return None


def availability() -> tuple[bool, str]:
    """(whether SGLang's host pools can be built here, why not / where from). Cached."""
    if "ok" not in _state:
        from .release import controller_model

        version = sglang_version()
        modelled, not_modelled = controller_model()
        if version is None:
            _state["ok"], _state["why"] = False, "SGLang is not installed"
        elif not modelled:
            _state["ok"], _state["why"] = False, f"SGLang {version} is installed, but the {not_modelled}"
        else:
            try:
                for name in _MODULES:
                    importlib.import_module(name)
            except Exception as e:  # a CPU machine without triton, a broken install
                _state["ok"] = False
                _state["why"] = (
                    f"SGLang {version} is installed but its host pools do not import: {type(e).__name__}: {e}"
                )
            else:
                _state["ok"], _state["why"] = True, f"SGLang {version}"
    return bool(_state["ok"]), str(_state["why"])


def _ptrs(tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.uint64)


def _rows(
    tokens: int, page_size: int, width: tuple[int, ...], layers: int, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    # one padding page, as SGLang's device pools have
    return tuple(torch.zeros(tokens + page_size, *width, dtype=dtype) for _ in range(layers))


def mha_pool(
    *, layout: str, dtype: torch.dtype, page_size: int, pages: int, layers: int, heads: int, head_dim: int
) -> Any:
    """SGLang's ``MHATokenToKVPoolHost``: room for at least ``pages`` pages (host ratio 2
    over a device pool of ``pages / 2`` pages, as SGLang sizes it)."""
    from sglang.srt.mem_cache.device_pool_info import KVBufferLayout, KVBuffers, MHABufferInfo
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    device_tokens = (pages + 1) // 2 * page_size
    k = _rows(device_tokens, page_size, (heads, head_dim), layers, dtype)
    v = _rows(device_tokens, page_size, (heads, head_dim), layers, dtype)
    info = MHABufferInfo(
        buffers=KVBuffers(k=k, v=v, k_data_ptrs=_ptrs(k), v_data_ptrs=_ptrs(v), layout=KVBufferLayout.NHD),
        page_size=page_size,
        head_num=heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
        dtype=dtype,
        device=torch.device("cpu"),
    )
    return MHATokenToKVPoolHost(
        info,
        2.0,
        0,
        page_size,
        layout,
        pin_memory=False,
        device="cpu",
        device_capacity_tokens=device_tokens,
        start_layer=0,
        end_layer=layers,
    )


def mla_pool(
    *,
    layout: str,
    dtype: torch.dtype,
    page_size: int,
    pages: int,
    layers: int,
    kv_lora_rank: int,
    rope_dim: int,
) -> Any:
    """SGLang's ``MLATokenToKVPoolHost`` (one latent row of ``kv_lora_rank + rope_dim``)."""
    from sglang.srt.mem_cache.device_pool_info import MLABufferInfo
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost

    device_tokens = (pages + 1) // 2 * page_size
    width = kv_lora_rank + rope_dim
    rows = _rows(device_tokens, page_size, (1, width), layers, dtype)
    info = MLABufferInfo(
        buffers=rows,
        data_ptrs=_ptrs(rows),
        layer_indices=tuple(range(layers)),
        device_layer_num=layers,
        page_size=page_size,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=rope_dim,
        kv_cache_dim=width,
        dtype=dtype,
        device=torch.device("cpu"),
    )
    return MLATokenToKVPoolHost(
        info,
        2.0,
        0,
        page_size,
        layout,
        pin_memory=False,
        device="cpu",
        device_capacity_tokens=device_tokens,
        start_layer=0,
        end_layer=layers,
        target_layer_num=layers,
    )


def swa_pool(*, dtype: torch.dtype, page_size: int, pages: int, heads: int, head_dim: int) -> Any:
    """The SWA host pool of a hybrid-SWA model: ``MHATokenToKVPoolHost`` over one
    sliding-window layer, ``page_first``."""
    return mha_pool(
        layout="page_first",
        dtype=dtype,
        page_size=page_size,
        pages=pages,
        layers=1,
        heads=heads,
        head_dim=head_dim,
    )
