"""The L3 object layout for KV-aware routers against the REAL SGLang 0.5.23: our Mooncake
backend under ``sglang-mooncake`` answers ``describe_l3_object_layout(sidecar_pool_specs=...,
swa_trailing_pages=..., page_size=...)`` exactly as SGLang's own ``MooncakeStore`` does
(equal after a JSON round trip), for the same config and host pools: MLA (enabled) and MHA
(disabled, SGLang's reason), with and without sidecar pools, the disabled answers for a
rank-sharded sidecar and for a trailing-pages pool without a window, a pipeline stage, and
through the bridge. Collected only in ``tox -e sglang``."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from mooncake.store import MooncakeDistributedStore
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore
from sglang_pools import PAGE_SIZE, mamba_pool, mha_pool, mla_pool, swa_pool

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backends" / "mooncake" / "tests"))
os.environ.setdefault("MC_LOG_LEVEL", "ERROR")

from _servers import MooncakeCluster
from hicache_backend_mooncake import MooncakeStorage

from hicache_sdk.sglang import BRIDGE_EXTRA_CONFIG, HiCacheSDKStorage

P = sgl.PoolName
SPEC = sgl.SidecarPoolSpec
POLICY = sgl.PoolHitPolicy

#: name -> (KV pool, is_mla, [(pool name, pool builder)], sidecar specs, swa_trailing_pages)
CASES: dict[
    str, tuple[Callable[[], Any], bool, list[tuple[Any, Callable[[], Any]]], tuple[Any, ...], int | None]
] = {
    "mla": (lambda: mla_pool("page_first"), True, [], (), None),
    "mla-layer_first": (lambda: mla_pool("layer_first"), True, [], (), None),
    "mla-indexer": (
        lambda: mla_pool("page_first"),
        True,
        [(P.INDEXER, lambda: mla_pool("page_first"))],
        (SPEC(P.INDEXER, P.KV, POLICY.ALL_PAGES),),
        None,
    ),
    "mla-swa-window": (lambda: mla_pool("page_first"), True, [(P.SWA, swa_pool)], (), 4),
    "mla-swa-no-window": (lambda: mla_pool("page_first"), True, [(P.SWA, swa_pool)], (), None),
    "mla-swa-spec-from-kv": (
        lambda: mla_pool("page_first"),
        True,
        [(P.SWA, swa_pool)],
        (SPEC(P.SWA, P.SWA, POLICY.TRAILING_PAGES),),
        3,
    ),
    "mla-mamba": (lambda: mla_pool("page_first"), True, [(P.MAMBA, mamba_pool)], (), None),
    "mla-draft-mha": (
        lambda: mla_pool("page_first"),
        True,
        [(P.DRAFT, lambda: mha_pool("page_first"))],
        (),
        None,
    ),
    "mla-draft-mla": (
        lambda: mla_pool("page_first"),
        True,
        [(P.DRAFT, lambda: mla_pool("page_first"))],
        (),
        None,
    ),
    "mha": (lambda: mha_pool("page_first"), False, [], (), None),
    "mha-swa": (lambda: mha_pool("page_first"), False, [(P.SWA, swa_pool)], (), 4),
    "mha-mamba": (lambda: mha_pool("page_first"), False, [(P.MAMBA, mamba_pool)], (), None),
}


@pytest.fixture(scope="module")
def cluster(mooncake_cluster: MooncakeCluster) -> MooncakeCluster:
    return mooncake_cluster


def _storage_config(cluster: MooncakeCluster, mla: bool, pool: Any, **kw: Any) -> Any:
    tag = kw.pop("tag", f"layout{uuid.uuid4().hex[:8]}")
    fields: dict[str, Any] = {
        "tp_rank": 0,
        "tp_size": 1,
        "pp_rank": 0,
        "pp_size": 1,
        "attn_cp_rank": 0,
        "attn_cp_size": 1,
        "is_mla_model": mla,
        "enable_storage_metrics": False,
        "is_page_first_layout": pool.layout == "page_first",
        "model_name": "org/layout-model",
        "extra_config": cluster.config(extra_backend_tag=tag, key_scheme="sglang-mooncake"),
    }
    fields.update(kw)
    return sgl.HiCacheStorageConfig(**fields)


def _register(store: Any, kv: Any, sidecars: list[tuple[Any, Any]]) -> None:
    store.register_mem_pool_host(kv)
    store.register_mem_host_pool_v2(kv, P.KV)
    for name, pool in sidecars:
        store.register_mem_host_pool_v2(pool, name)


def _both(cfg: Any, kv: Any, sidecars: list[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    theirs = MooncakeStore(cfg, kv)
    ours = MooncakeStorage(cfg, {})
    try:
        _register(theirs, kv, sidecars)
        _register(ours, kv, sidecars)
        yield theirs, ours
    finally:
        ours.close()
        theirs.close()


def _json(layout: dict[str, Any]) -> Any:
    return json.loads(json.dumps(layout))


@pytest.mark.parametrize("case", list(CASES))
def test_layout_equals_sglangs(cluster: MooncakeCluster, case: str) -> None:
    build_kv, mla, side, specs, window = CASES[case]
    kv = build_kv()
    sidecars = [(name, build()) for name, build in side]
    cfg = _storage_config(cluster, mla, kv)
    for theirs, ours in _both(cfg, kv, sidecars):
        args = {"sidecar_pool_specs": specs, "swa_trailing_pages": window, "page_size": PAGE_SIZE}
        want = _json(theirs.describe_l3_object_layout(**args))
        got = _json(ours.describe_l3_object_layout(**args))
        assert got == want
        # the answers are what each case is about, not two equal errors
        assert want["enabled"] is (
            case
            in (
                "mla",
                "mla-layer_first",
                "mla-indexer",
                "mla-swa-window",
                "mla-swa-spec-from-kv",
                "mla-draft-mla",
            )
        )
        if not mla:
            assert want["reason"] == "External L3 lookup requires rank-replicated/MLA pools"


def test_layout_of_a_pipeline_stage_without_a_model_or_tag(cluster: MooncakeCluster) -> None:
    kv = mla_pool("page_first")
    cfg = _storage_config(cluster, True, kv, pp_rank=1, pp_size=2, model_name="")
    cfg.extra_config.pop("extra_backend_tag")
    for theirs, ours in _both(cfg, kv, []):
        args = {"sidecar_pool_specs": (), "swa_trailing_pages": None, "page_size": PAGE_SIZE}
        want = _json(theirs.describe_l3_object_layout(**args))
        assert want["hicache_object_layout"]["key_prefix"] is None
        assert want["hicache_object_layout"]["pools"][0]["suffixes"] == ["_1_k"]
        assert _json(ours.describe_l3_object_layout(**args)) == want


def test_layout_names_are_the_objects_written(cluster: MooncakeCluster) -> None:
    """A router rebuilding ``{key_prefix}_{hash}{suffix}`` finds the objects ours wrote."""
    kv = mla_pool("page_first")
    cfg = _storage_config(cluster, True, kv)
    ours = MooncakeStorage(cfg, {})
    raw = MooncakeDistributedStore()
    assert raw.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", cluster.address) == 0
    try:
        _register(ours, kv, [])
        keys = [f"{i:064x}" for i in range(3)]
        assert ours.batch_set_v1(keys, torch.arange(3 * PAGE_SIZE)) == [True] * 3
        layout = ours.describe_l3_object_layout(
            sidecar_pool_specs=(), swa_trailing_pages=None, page_size=PAGE_SIZE
        )
        inner = layout["hicache_object_layout"]
        names = [f"{inner['key_prefix']}_{k}{s}" for k in keys for s in inner["pools"][0]["suffixes"]]
        assert list(raw.batch_is_exist(names)) == [1] * 3
    finally:
        raw.close()
        ours.close()


def test_the_bridge_forwards_the_layout_and_sglang_would_not_ask_it(cluster: MooncakeCluster) -> None:
    """Loaded through SGLang's ``dynamic`` backend the bridge offers the same method (a router
    may call it), but SGLang's scheduler serves ``/get_hicache_l3_cache_layout`` only for an
    ``isinstance(backend, MooncakeStore)``: for the bridge it answers "Mooncake storage is
    not attached" (scheduler.py, ``_hicache_l3_layout``)."""
    kv = mla_pool("page_first")
    cfg = _storage_config(cluster, True, kv)
    backend_config = dict(cfg.extra_config)
    cfg.extra_config = {**BRIDGE_EXTRA_CONFIG, "backend": "mooncake", "backend_config": backend_config}
    bridge = HiCacheSDKStorage(cfg, {})
    try:
        bridge.register_mem_pool_host(kv)
        bridge.register_mem_host_pool_v2(kv, P.KV)
        got = bridge.describe_l3_object_layout(
            sidecar_pool_specs=(), swa_trailing_pages=None, page_size=PAGE_SIZE
        )
        assert got["enabled"] is True
        assert got["hicache_object_layout"]["pools"] == [
            {"pool": "kv", "suffixes": ["__k"], "hit_policy": "all_pages"}
        ]
        assert not isinstance(bridge, MooncakeStore)
    finally:
        bridge.close()
