"""Our public contract against SGLang 0.5.23's (names, fields, defaults, signatures, semantics)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from hicache_sdk import spec
from hicache_sdk.sglang.versions import NEWEST as CURRENT


def test_every_method_has_sglangs_signature() -> None:
    for name, params, n_defaults, abstract in CURRENT.methods:
        fn = getattr(spec.HiCacheStorage, name)
        sig = inspect.signature(fn)
        got = [p for p in sig.parameters if p != "self"]
        assert got == list(params), name
        defaults = [p for p in sig.parameters.values() if p.default is not inspect.Parameter.empty]
        assert len(defaults) == n_defaults, name
        assert all(d.default is None for d in defaults), name
        assert getattr(fn, "__isabstractmethod__", False) is abstract, name


def test_abstract_set_is_exactly_sglangs() -> None:
    expected = {m[0] for m in CURRENT.methods if m[3]}
    assert spec.HiCacheStorage.__abstractmethods__ == frozenset(expected)


def _minimal_backend() -> spec.HiCacheStorage:
    class Minimal(spec.HiCacheStorage):  # what a backend written for SGLang implements
        def get(self, key, target_location=None, target_sizes=None):  # type: ignore[no-untyped-def]
            return None

        def batch_get(self, keys, target_locations=None, target_sizes=None):  # type: ignore[no-untyped-def]
            return [None] * len(keys)

        def set(self, key, value=None, target_location=None, target_sizes=None):  # type: ignore[no-untyped-def]
            return True

        def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):  # type: ignore[no-untyped-def]
            return True

        def exists(self, key):  # type: ignore[no-untyped-def]
            return key in ("a", "b", "d")

    return Minimal()


def test_unimplemented_v1_v2_raise_instead_of_returning_none() -> None:
    b = _minimal_backend()
    for call in (
        lambda: b.batch_get_v1(["a"], None),  # type: ignore[arg-type]
        lambda: b.batch_set_v1(["a"], None),  # type: ignore[arg-type]
        lambda: b.batch_exists_v2(["a"]),
        lambda: b.batch_get_v2([]),
        lambda: b.batch_set_v2([]),
    ):
        with pytest.raises(NotImplementedError, match="Minimal"):
            call()


def test_defaults_of_the_abc() -> None:
    b = _minimal_backend()
    assert b.batch_exists(["a", "b", "c", "d"]) == 2
    assert b.batch_exists([]) == 0
    assert b.get_stats() is None
    assert b.clear() is None
    b.close()
    b.close()  # idempotent no-op
    b.register_mem_pool_host("pool")
    assert b.mem_pool_host == "pool"
    b.register_mem_host_pool_v2("p2", spec.PoolName.MAMBA)
    assert b.registered_pools == {spec.PoolName.MAMBA: "p2"}


def test_config_fields_order_and_defaults() -> None:
    sig = inspect.signature(spec.HiCacheStorageConfig)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert [p.name for p in params] == [f for f, _ in CURRENT.config_fields]
    for p, (_, default) in zip(params, CURRENT.config_fields):
        if default is not ...:
            assert p.default == default, p.name


def test_config_keyword_construction_tolerates_newer_fields() -> None:
    c = spec.HiCacheStorageConfig(tp_rank=1, tp_size=2, model_name="m", kv_cache_dtype="fp8", future=3)
    assert c.tp_rank == 1 and c.model_name == "m"
    assert c.unknown_fields == {"kv_cache_dtype": "fp8", "future": 3}


def test_config_secrets_not_in_repr() -> None:
    c = spec.HiCacheStorageConfig(extra_config={"password": "hunter2", "url": "redis://u:pw@h"})
    r = repr(c)
    assert "hunter2" not in r and "pw@h" not in r
    assert "'password'" in r


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"dcp_size": 0}, "Invalid DCP"),
        ({"dcp_size": 2, "dcp_rank": 0}, "requires MLA"),
        ({"dcp_size": 2, "dcp_rank": 1, "is_mla_model": True, "tp_size": 4, "tp_rank": 2}, "contiguous"),
        ({"dcp_size": 2, "dcp_rank": 0, "is_mla_model": True, "tp_size": 4, "tp_rank": 2}, "logical page"),
    ],
)
def test_config_dcp_validation(kw: dict[str, object], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        spec.HiCacheStorageConfig(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mla", "tp_rank", "dcp_size", "dcp_rank", "writer"),
    [
        (False, 3, 1, 0, True),
        (True, 0, 1, 0, True),
        (True, 1, 1, 0, False),
        (True, 1, 2, 1, True),
        (True, 3, 2, 1, False),
        (True, 2, 2, 0, False),
    ],
)
def test_is_storage_writer(mla: bool, tp_rank: int, dcp_size: int, dcp_rank: int, writer: bool) -> None:
    c = spec.HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=4, is_mla_model=mla, dcp_size=dcp_size, dcp_rank=dcp_rank,
        logical_page_size=64 if dcp_size > 1 else None,
    )  # fmt: skip
    assert c.is_storage_writer is writer


def test_dataclass_fields_match_profile() -> None:
    names = lambda cls: tuple(f.name for f in dataclasses.fields(cls))  # noqa: E731
    assert names(spec.PoolTransfer) == CURRENT.pool_transfer_fields
    assert names(spec.PoolTransferResult) == CURRENT.pool_transfer_result_fields
    assert names(spec.HiCacheStorageExtraInfo) == CURRENT.extra_info_fields
    assert names(spec.StorageMetrics) == CURRENT.storage_metrics_fields
    assert tuple(p.value for p in spec.PoolName) == CURRENT.pool_names
    assert tuple(p.value for p in spec.PoolHitPolicy) == CURRENT.hit_policies
    assert CURRENT.storage_batch_size == spec.STORAGE_BATCH_SIZE
    assert spec.HiCacheStorageExtraInfo().prefix_keys is None  # the 0.5.5-0.5.10 (None,) bug is not ours
    t = spec.PoolTransfer(name=spec.PoolName.KV)
    assert (t.hit_policy, t.block_pages, t.group_pages) == (spec.PoolHitPolicy.ALL_PAGES, 0, 0)
    assert (
        spec.SidecarPoolSpec(spec.PoolName.INDEXER, spec.PoolName.KV).hit_policy
        is spec.PoolHitPolicy.ALL_PAGES
    )


def test_pool_name_behaves_like_its_string() -> None:
    assert str(spec.PoolName.MAMBA) == "mamba"
    assert spec.PoolName.MAMBA == "mamba"
    assert {spec.PoolName.SWA: 1}["swa"] == 1
    assert spec.pool_name_str(spec.PoolName.SWA) == "swa"
    assert spec.pool_name_str("brand_new_pool") == "brand_new_pool"
    with pytest.raises(ValueError, match="pool name"):
        spec.pool_name_str(3)
    with pytest.raises(ValueError, match="pool name"):
        spec.pool_name_str("")


def test_pool_transfer_result_helpers_0_5_23_meaning() -> None:
    r = spec.PoolTransferResult.empty()
    assert (r.kv_hit_pages, r.extra_pool_hit_pages, r.restorable_prefix_pages) == (0, {}, None)
    r.update_kv_hit_pages(3)
    r.update_kv_hit_pages(2)
    assert r.kv_hit_pages == 3
    r.update_extra_pool_hit_pages({"mamba": 2})
    r.update_extra_pool_hit_pages({"mamba": 1, "swa": 4})
    assert r.extra_pool_hit_pages == {"mamba": 1, "swa": 4}  # counts overwrite (0.5.23), not sums


def test_count_pool_hits() -> None:
    assert spec.count_pool_hits({"kv": [True, True, False, True], "m": [], "s": [True]}) == {
        "kv": 2,
        "m": 0,
        "s": 1,
    }
