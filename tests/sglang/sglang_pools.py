"""Build SGLang 0.5.23's own host pools on CPU, the way its pool assembler does.

SGLang constructs ``MHATokenToKVPoolHost`` / ``MLATokenToKVPoolHost`` from a
``MHABufferInfo`` / ``MLABufferInfo`` that describes the device KV buffers (per-layer
tensors plus their pointer tables). These are SGLang's real description types; here the
"device" buffers are small CPU tensors, which is all the host pool reads from them
(geometry, dtype, pointers). Only imported when the real SGLang is installed.
"""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.mem_cache.device_pool_info import (
    KVBufferLayout,
    KVBuffers,
    MambaStateBufferInfo,
    MHABufferInfo,
    MLABufferInfo,
)
from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost

LAYERS = 3
HEADS = 2
HEAD_DIM = 8
KV_LORA_RANK = 8
QK_ROPE_HEAD_DIM = 4
PAGE_SIZE = 4
DEVICE_TOKENS = 64
DTYPE = torch.bfloat16
CPU = torch.device("cpu")


def _ptr_table(tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.uint64)


def _device_rows(width_shape: tuple[int, ...], layers: int = LAYERS) -> tuple[torch.Tensor, ...]:
    # One padding page, as SGLang's device pools have.
    return tuple(torch.zeros(DEVICE_TOKENS + PAGE_SIZE, *width_shape, dtype=DTYPE) for _ in range(layers))


def mha_pool(layout: str, layers: int = LAYERS) -> Any:
    """An SGLang MHA host pool (``layer_first`` or ``page_first``), 2x the device size.

    With ``layers`` < ``LAYERS`` it is also what SGLang 0.5.23 builds as the SWA host pool of a
    hybrid-SWA model without a unified page envelope (``build_kv_host_pool`` on the SWA
    device pool: the same ``MHATokenToKVPoolHost`` class over the sliding-window layers)."""
    k = _device_rows((HEADS, HEAD_DIM), layers)
    v = _device_rows((HEADS, HEAD_DIM), layers)
    info = MHABufferInfo(
        buffers=KVBuffers(
            k=k, v=v, k_data_ptrs=_ptr_table(k), v_data_ptrs=_ptr_table(v), layout=KVBufferLayout.NHD
        ),
        page_size=PAGE_SIZE,
        head_num=HEADS,
        head_dim=HEAD_DIM,
        v_head_dim=HEAD_DIM,
        dtype=DTYPE,
        device=CPU,
    )
    return MHATokenToKVPoolHost(
        info,
        2.0,
        0,
        PAGE_SIZE,
        layout,
        pin_memory=False,
        device="cpu",
        device_capacity_tokens=DEVICE_TOKENS,
        start_layer=0,
        end_layer=layers,
    )


def mla_pool(layout: str) -> Any:
    """An SGLang MLA host pool (one latent row of ``kv_lora_rank + qk_rope_head_dim``)."""
    width = KV_LORA_RANK + QK_ROPE_HEAD_DIM
    rows = _device_rows((1, width))
    info = MLABufferInfo(
        buffers=rows,
        data_ptrs=_ptr_table(rows),
        layer_indices=tuple(range(LAYERS)),
        device_layer_num=LAYERS,
        page_size=PAGE_SIZE,
        kv_lora_rank=KV_LORA_RANK,
        qk_rope_head_dim=QK_ROPE_HEAD_DIM,
        kv_cache_dim=width,
        dtype=DTYPE,
        device=CPU,
    )
    return MLATokenToKVPoolHost(
        info,
        2.0,
        0,
        PAGE_SIZE,
        layout,
        pin_memory=False,
        device="cpu",
        device_capacity_tokens=DEVICE_TOKENS,
        start_layer=0,
        end_layer=LAYERS,
        target_layer_num=LAYERS,
    )


MAMBA_LAYERS = 2
MAMBA_SLOTS = 8


def mamba_pool() -> Any:
    """SGLang's ``MambaPoolHost`` (page_first, page size 1: one state slot per page), over a
    device-side ``MambaStateBufferInfo`` of one float32 temporal state and two bfloat16 conv
    states, as ``hybrid_pool_assembler`` builds it (mixed dtypes, like real SSM models)."""
    temporal = torch.zeros(MAMBA_LAYERS, MAMBA_SLOTS + 1, 2, 4, dtype=torch.float32)
    conv = tuple(torch.zeros(MAMBA_LAYERS, MAMBA_SLOTS + 1, 3, w, dtype=DTYPE) for w in (4, 6))
    info = MambaStateBufferInfo(temporal=temporal, conv=conv)
    return MambaPoolHost(
        info, 2.0, 0, device_capacity=MAMBA_SLOTS, pin_memory=False, device="cpu", layout="page_first"
    )


def swa_pool() -> Any:
    """The SWA host pool of a hybrid-SWA model (see :func:`mha_pool`): one sliding-window
    layer, page_first."""
    return mha_pool("page_first", layers=1)


POOLS = {
    "mha-layer_first": (lambda: mha_pool("layer_first"), False),
    "mha-page_first": (lambda: mha_pool("page_first"), False),
    "mla-layer_first": (lambda: mla_pool("layer_first"), True),
    "mla-page_first": (lambda: mla_pool("page_first"), True),
}
