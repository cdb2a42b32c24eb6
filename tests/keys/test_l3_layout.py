"""The L3 object layout (``hicache_sdk.keys.l3_layout``) from our key schemes and host pools.
Its equality with SGLang's own ``MooncakeStore.describe_l3_object_layout`` is tested in
``tests/sglang/test_sglang_mooncake_layout.py`` (real SGLang); here: a router rebuilding
``[key_prefix_]<hash><suffix>`` gets exactly the names the scheme gives, and the disabled
answers say why."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from hicache_sdk.hostpool import IndexerHostPool, MambaHostPool, MHAHostPool, MLAHostPool, describe_pool
from hicache_sdk.keys.l3_layout import disabled_layout, file_layout, mooncake_layout
from hicache_sdk.keys.schemes import make_scheme
from hicache_sdk.spec import HiCacheStorageConfig, PoolHitPolicy, PoolName, SidecarPoolSpec

PAGE = 4


def _sc(mla: bool, **kw: object) -> HiCacheStorageConfig:
    return HiCacheStorageConfig(is_mla_model=mla, model_name="org/m", **kw)  # type: ignore[arg-type]


def _kv(mla: bool) -> object:
    pool = MLAHostPool(8, PAGE, 2, 8, 4) if mla else MHAHostPool(8, PAGE, 2, 2, 8)
    return describe_pool(pool, "kv", rank_replicated=mla)


def _names(layout: dict, hashes: list[str]) -> dict[str, list[str]]:
    inner = layout["hicache_object_layout"]
    prefix = f"{inner['key_prefix']}_" if inner["key_prefix"] else ""
    return {p["pool"]: [f"{prefix}{h}{s}" for h in hashes for s in p["suffixes"]] for p in inner["pools"]}


HASHES = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(3)]


@pytest.mark.parametrize(("tag", "pp"), [("prod", (0, 1)), (None, (1, 2))])
def test_mla_layout_rebuilds_the_schemes_names(tag: str | None, pp: tuple[int, int]) -> None:
    extra = {"extra_backend_tag": tag} if tag else {}
    sc = _sc(True, pp_rank=pp[0], pp_size=pp[1], extra_config=extra)
    scheme = make_scheme("sglang-mooncake", sc)
    kv = _kv(True)
    indexer = describe_pool(IndexerHostPool(8, PAGE, 2, 8), "indexer", rank_replicated=True)
    specs = [SidecarPoolSpec(PoolName.INDEXER, PoolName.KV, PoolHitPolicy.ALL_PAGES)]
    layout = mooncake_layout(
        scheme, kv, [indexer], sidecar_pool_specs=specs, swa_trailing_pages=None, page_size=PAGE
    )
    assert layout["enabled"] is True and json.loads(json.dumps(layout)) == layout
    inner = layout["hicache_object_layout"]
    assert inner["key_prefix"] == ("prod_org-m" if tag else "org-m")
    assert (inner["is_mla_backend"], inner["pp_rank"], inner["pp_size"]) == (True, *pp)
    got = _names(layout, HASHES)
    assert got["kv"] == [o.name for h in HASHES for o in scheme.page_objects(h, kv)]
    assert got["indexer"] == [o.name for h in HASHES for o in scheme.page_objects(h, indexer)]
    assert [p["hit_policy"] for p in inner["pools"]] == ["all_pages", "all_pages"]


def test_mha_is_disabled_with_sglangs_reason() -> None:
    scheme = make_scheme("sglang-mooncake", _sc(False))
    layout = mooncake_layout(
        scheme, _kv(False), [], sidecar_pool_specs=(), swa_trailing_pages=None, page_size=PAGE
    )
    assert layout["enabled"] is False
    assert layout["reason"] == "External L3 lookup requires rank-replicated/MLA pools"
    assert layout["hicache_object_layout"]["pools"] == []


def test_trailing_pages_need_a_window_and_mamba_disables() -> None:
    scheme = make_scheme("sglang-mooncake", _sc(True))
    swa = describe_pool(MHAHostPool(8, PAGE, 1, 2, 8), "swa")
    no_window = mooncake_layout(
        scheme, _kv(True), [swa], sidecar_pool_specs=(), swa_trailing_pages=None, page_size=PAGE
    )
    assert no_window == disabled_layout(
        "Unknown or non-positive trailing-page window for pool swa", backend="mooncake", page_size=PAGE
    )
    windowed = mooncake_layout(
        scheme, _kv(True), [swa], sidecar_pool_specs=(), swa_trailing_pages=3, page_size=PAGE
    )
    assert windowed["hicache_object_layout"]["pools"][1] == {
        "pool": "swa",
        "suffixes": ["__swa"],
        "hit_policy": "trailing_pages",
        "trailing_pages": 3,
    }
    mamba = describe_pool(MambaHostPool(4, (2,), [(2,)], layer_num=1), "mamba", rank_replicated=False)
    layout = mooncake_layout(
        scheme, _kv(True), [mamba], sidecar_pool_specs=(), swa_trailing_pages=None, page_size=PAGE
    )
    assert layout["enabled"] is False and layout["reason"] == "Auxiliary L3 pools are not rank-replicated/MLA"
    assert layout["hicache_object_layout"]["pools"][1]["suffixes"] == ["_0_temporal", "_0_conv_0"]


def test_file_layout_rebuilds_the_file_names() -> None:
    sc = _sc(False, tp_rank=1, tp_size=2)
    scheme = make_scheme("sglang-file", sc)
    kv = _kv(False)
    layout = file_layout(scheme, kv, [], page_size=PAGE)
    assert layout["enabled"] is True and layout["backend"] == "file"
    inner = layout["hicache_object_layout"]
    assert inner["key_prefix"] is None and (inner["tp_rank"], inner["tp_size"]) == (1, 2)
    assert _names(layout, HASHES)["kv"] == [f"{h}_org-m_1_2.bin" for h in HASHES]
    assert _names(layout, HASHES)["kv"] == [o.name for h in HASHES for o in scheme.page_objects(h, kv)]


def test_page_hashes_need_no_torch_pools_to_name() -> None:
    """The layout depends on the pools' kinds, not their sizes (what ``hicache layout``
    relies on when it stands small pools of ours in for the engine's)."""
    scheme = make_scheme("sglang-mooncake", _sc(True))
    small = describe_pool(MLAHostPool(8, PAGE, 1, 8, 4, dtype=torch.float16), "kv", rank_replicated=True)
    big = _kv(True)
    args = {"sidecar_pool_specs": (), "swa_trailing_pages": None, "page_size": PAGE}
    assert mooncake_layout(scheme, small, [], **args) == mooncake_layout(scheme, big, [], **args)
