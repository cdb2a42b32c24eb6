"""Our contract profile (``hicache_sdk.sglang.versions``) against the REAL SGLang 0.5.23.

``tests/test_spec.py`` checks our classes against the profile; this module checks the
profile against SGLang itself, so the chain "ours == profile == SGLang" is closed.
Collected only in ``tox -e sglang``.
"""

from __future__ import annotations

import dataclasses
import inspect

import sglang
from sglang.srt.mem_cache import hicache_storage as sg
from sglang.srt.observability.metrics_collector import StorageMetrics

import hicache_sdk
from hicache_sdk.sglang.versions import CURRENT


def test_sglang_version_is_the_profiles() -> None:
    assert sglang.__version__ == CURRENT.sglang_version


def test_methods_match() -> None:
    for name, params, n_defaults, abstract in CURRENT.methods:
        fn = getattr(sg.HiCacheStorage, name)
        sig = inspect.signature(fn)
        assert [p for p in sig.parameters if p != "self"] == list(params), name
        defaults = [p for p in sig.parameters.values() if p.default is not inspect.Parameter.empty]
        assert len(defaults) == n_defaults, name
        assert getattr(fn, "__isabstractmethod__", False) is abstract, name
    assert sg.HiCacheStorage.__abstractmethods__ == hicache_sdk.HiCacheStorage.__abstractmethods__


def test_config_fields_match() -> None:
    fields = dataclasses.fields(sg.HiCacheStorageConfig)
    got = [(f.name, ... if f.default is dataclasses.MISSING else f.default) for f in fields]
    assert got == list(CURRENT.config_fields)


def test_types_match() -> None:
    names = lambda cls: tuple(f.name for f in dataclasses.fields(cls))  # noqa: E731
    assert names(sg.PoolTransfer) == CURRENT.pool_transfer_fields
    assert names(sg.PoolTransferResult) == CURRENT.pool_transfer_result_fields
    assert names(sg.HiCacheStorageExtraInfo) == CURRENT.extra_info_fields
    assert names(StorageMetrics) == CURRENT.storage_metrics_fields
    assert tuple(p.value for p in sg.PoolName) == CURRENT.pool_names
    assert tuple(p.value for p in sg.PoolHitPolicy) == CURRENT.hit_policies
    assert CURRENT.storage_batch_size == sg.STORAGE_BATCH_SIZE
    assert names(sg.SidecarPoolSpec) == tuple(f.name for f in dataclasses.fields(hicache_sdk.SidecarPoolSpec))


def test_semantics_match_on_the_same_inputs() -> None:
    results = {"kv": [True, True, False, True], "m": [], "s": [True]}
    assert sg.count_pool_hits(results) == hicache_sdk.count_pool_hits(results)
    theirs, ours = sg.PoolTransferResult.empty(), hicache_sdk.PoolTransferResult.empty()
    for r in (theirs, ours):
        r.update_kv_hit_pages(3)
        r.update_kv_hit_pages(1)
        r.update_extra_pool_hit_pages({"mamba": 2})
        r.update_extra_pool_hit_pages({"mamba": 1})
    assert dataclasses.asdict(theirs) == dataclasses.asdict(ours)
    for kw in ({"is_mla_model": True, "tp_rank": 1}, {"is_mla_model": False, "tp_rank": 3}):
        base = dict(
            tp_rank=0, tp_size=4, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
            is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True, model_name="m",
        )  # fmt: skip
        base.update(kw)
        assert (
            sg.HiCacheStorageConfig(**base).is_storage_writer
            == hicache_sdk.HiCacheStorageConfig(**base).is_storage_writer
        )


def test_hashing_matches_sglang() -> None:
    from sglang.srt.mem_cache import utils as sg_utils

    tokens = [*range(1, 129), 2**40, 7]
    for page in (None, 4, 64):
        assert sg_utils.get_hash_str(tokens, None, page) == hicache_sdk.get_hash_str(tokens, None, page)
    seed = hicache_sdk.storage_namespace_seed("lora-x", "salt")
    assert sg_utils.storage_namespace_seed("lora-x", "salt") == seed
