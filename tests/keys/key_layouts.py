"""Pool layouts shared by the key-scheme tests."""

from __future__ import annotations

import dataclasses

from hicache_sdk.hostpool.layout import PoolLayout

MHA = PoolLayout(
    "kv", "mha", "page_first", "bfloat16", 64, (4096, 4096), (0, 1), (("head_num", 8), ("layer_num", 4))
)
MHA_LF = dataclasses.replace(
    MHA, layout="layer_first", segment_sizes=(1024,) * 8, flat_order=(0, 2, 4, 6, 1, 3, 5, 7)
)
MLA = PoolLayout(
    "kv", "mla", "page_first", "bfloat16", 64, (9216,), (0,), (("kv_lora_rank", 512),), rank_replicated=True
)
MAMBA = PoolLayout("mamba", "mamba", "page_first", "float32", 1, (800, 100, 60), (0, 1, 2))
SWA_MHA = dataclasses.replace(MHA, name="swa", kind="swa")
INDEXER = PoolLayout("indexer", "indexer", "page_first", "uint8", 64, (8448,), (0,), rank_replicated=True)
C4 = dataclasses.replace(INDEXER, name="deepseek_v4_c4", kind="other")
