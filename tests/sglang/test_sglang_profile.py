"""The installed release's contract profile (``hicache_sdk.sglang.versions.CURRENT``) against
that REAL SGLang release, read at run time (imported classes, signatures, dataclass fields,
the factory's behaviour): nothing here shares code with ``scripts/gen_sglang_profiles.py``,
which parses the wheel's source.

``tests/test_spec.py`` checks our classes against the newest profile; this module checks the
profile against SGLang itself, so the chain "ours == profile == SGLang" is closed for every
release with a ``tox -e sglang-X.Y.Z`` env. Collected only with ``HICACHE_SGLANG_ENV=1``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import inspect
from pathlib import Path
from typing import Any

import pytest
import sglang
from sglang.srt.mem_cache import hicache_storage as sg

import hicache_sdk
from hicache_sdk.sglang.versions import CURRENT, release_line

NEWEST_ONLY = CURRENT.sglang_version == "0.5.23"


def _names(cls: Any) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls)) if cls is not None else ()


def test_sglang_version_is_the_profiles() -> None:
    assert release_line(importlib.metadata.version("sglang")) == CURRENT.sglang_version
    assert importlib.metadata.version("sglang") == CURRENT.wheel_version
    assert getattr(sglang, "__version__", CURRENT.wheel_version) == CURRENT.wheel_version


def test_methods_match() -> None:
    public = [
        n for n, v in vars(sg.HiCacheStorage).items() if not n.startswith("_") and inspect.isfunction(v)
    ]
    assert public == [m[0] for m in CURRENT.methods]
    for name, params, n_defaults, abstract in CURRENT.methods:
        fn = getattr(sg.HiCacheStorage, name)
        sig = inspect.signature(fn)
        assert [p for p in sig.parameters if p != "self"] == list(params), name
        defaults = [p for p in sig.parameters.values() if p.default is not inspect.Parameter.empty]
        assert len(defaults) == n_defaults, name
        assert getattr(fn, "__isabstractmethod__", False) is abstract, name
    assert sg.HiCacheStorage.__abstractmethods__ == {m[0] for m in CURRENT.methods if m[3]}
    assert sg.HiCacheStorage.__abstractmethods__ == hicache_sdk.HiCacheStorage.__abstractmethods__


def test_config_fields_match() -> None:
    fields = dataclasses.fields(sg.HiCacheStorageConfig)
    got = [(f.name, ... if f.default is dataclasses.MISSING else f.default) for f in fields]
    assert got == list(CURRENT.config_fields)


def test_types_match() -> None:
    assert _names(getattr(sg, "PoolTransfer", None)) == CURRENT.pool_transfer_fields
    assert _names(getattr(sg, "PoolTransferResult", None)) == CURRENT.pool_transfer_result_fields
    assert _names(sg.HiCacheStorageExtraInfo) == CURRENT.extra_info_fields
    assert tuple(p.value for p in getattr(sg, "PoolName", ())) == CURRENT.pool_names
    assert tuple(p.value for p in getattr(sg, "PoolHitPolicy", ())) == CURRENT.hit_policies


def test_metrics_class_lives_where_the_profile_says() -> None:
    metrics = importlib.import_module(CURRENT.storage_metrics_module).StorageMetrics
    assert _names(metrics) == CURRENT.storage_metrics_fields
    assert metrics.__module__ == CURRENT.storage_metrics_module


def test_batch_size_matches() -> None:
    if hasattr(sg, "STORAGE_BATCH_SIZE"):
        assert CURRENT.storage_batch_size == sg.STORAGE_BATCH_SIZE
        return
    # before the module constant: the controller's attribute, set in its constructor
    spec = importlib.util.find_spec("sglang.srt.managers.cache_controller")
    assert spec is not None and spec.origin is not None
    text = Path(spec.origin).read_text(encoding="utf-8")
    assert f"self.storage_batch_size = {CURRENT.storage_batch_size}\n" in text


def test_unified_cache_linker_presence_matches() -> None:
    """``has_unified_cache_linker`` is true exactly where the installed release has the
    ``sglang.srt.mem_cache.unified_cache`` package."""
    spec = importlib.util.find_spec("sglang.srt.mem_cache.unified_cache")
    assert (spec is not None) is CURRENT.has_unified_cache_linker


def _config(extra: dict[str, Any]) -> Any:
    """SGLang's ``HiCacheStorageConfig`` of this release, its required fields filled in."""
    kwargs: dict[str, Any] = {"extra_config": extra}
    for f, default in CURRENT.config_fields:
        if default is ...:
            kwargs[f] = (
                "m"
                if f == "model_name"
                else 1
                if f.endswith("_size")
                else 0
                if f.endswith("_rank")
                else False
            )
    return sg.HiCacheStorageConfig(**kwargs)


@pytest.mark.parametrize("missing", ["backend_name", "module_path", "class_name"])
def test_dynamic_loader_requires_the_profiles_keys(missing: str) -> None:
    """SGLang's factory itself refuses a ``dynamic`` config without each required key."""
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    assert missing in CURRENT.dynamic_loader_keys
    extra = {"backend_name": "x", "module_path": "hicache_sdk.sglang", "class_name": "HiCacheSDKStorage"}
    del extra[missing]
    cfg = _config(extra)
    with pytest.raises(ValueError, match=missing):
        StorageBackendFactory.create_backend("dynamic", cfg, None)


@pytest.mark.skipif(not NEWEST_ONLY, reason="the SDK's classes mirror the newest release (0.5.23)")
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
    assert _names(sg.SidecarPoolSpec) == _names(hicache_sdk.SidecarPoolSpec)
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


@pytest.mark.skipif(not NEWEST_ONLY, reason="the SDK's page hash is the newest release's (0.5.23)")
def test_hashing_matches_sglang() -> None:
    from sglang.srt.mem_cache import utils as sg_utils

    tokens = [*range(1, 129), 2**40, 7]
    for page in (None, 4, 64):
        assert sg_utils.get_hash_str(tokens, None, page) == hicache_sdk.get_hash_str(tokens, None, page)
    seed = hicache_sdk.storage_namespace_seed("lora-x", "salt")
    assert sg_utils.storage_namespace_seed("lora-x", "salt") == seed


def test_salted_seeding_matches() -> None:
    """``salted_seeding`` is true exactly where the release seeds page hashes from the
    request's ``extra_key`` / ``cache_salt`` (``storage_namespace_seed``)."""
    try:
        utils = importlib.import_module("sglang.srt.mem_cache.utils")
    except ImportError:
        utils = None
    assert callable(getattr(utils, "storage_namespace_seed", None)) is CURRENT.salted_seeding


def _release_hash_fn() -> Any:
    """This release's ``get_hash_str`` (``mem_cache/utils.py`` from 0.5.14,
    ``hicache_storage.py`` before)."""
    for name in ("sglang.srt.mem_cache.utils", "sglang.srt.mem_cache.hicache_storage"):
        try:
            fn = getattr(importlib.import_module(name), "get_hash_str", None)
        except ImportError:
            continue
        if callable(fn):
            return fn
    raise AssertionError("no get_hash_str in this release's mem_cache")


def test_page_hash_chain_matches_this_release() -> None:
    """The SDK's page hash equals the release's on a chained prefix (token ids that every
    release encodes alike, with and without a prior hash), and, where the release seeds
    chains from ``extra_key`` / ``cache_salt``, the seed of salted requests too."""
    theirs = _release_hash_fn()
    prior = None
    for page in range(4):
        tokens = list(range(page * 16 + 1, page * 16 + 17))
        ours = hicache_sdk.get_hash_str(tokens, prior)
        assert theirs(tokens, prior) == ours, page
        prior = ours
    if CURRENT.salted_seeding:
        from sglang.srt.mem_cache import utils as sg_utils

        for extra_key, salt in (("lora-x", None), (None, "tenant-salt"), ("k", "s"), (None, None)):
            seed = hicache_sdk.storage_namespace_seed(extra_key, salt)
            assert sg_utils.storage_namespace_seed(extra_key, salt) == seed, (extra_key, salt)
            if seed is not None:
                assert theirs([1, 2, 3], seed) == hicache_sdk.get_hash_str([1, 2, 3], seed)


def test_hash_vectors_of_this_releases_seeding_rule() -> None:
    """``hash_vectors.json``: this release's own hash function gives each request the chain
    of its profile's seeding rule: the salted chain where ``salted_seeding`` (the seed from
    the release's ``storage_namespace_seed``, and its ``get_storage_hash_str`` on a key that
    carries ``extra_key`` / ``cache_salt``), the unseeded chain elsewhere (the release's only
    page hash: a salted request shares its keys with an unsalted one)."""
    import json

    theirs = _release_hash_fn()
    doc = json.loads((Path(__file__).parent / "hash_vectors.json").read_text(encoding="utf-8"))
    ps = doc["page_size"]
    rule = "salted" if CURRENT.salted_seeding else "unseeded"
    for case in doc["cases"]:
        tokens = case["tokens"]
        prior = case["seed"] if CURRENT.salted_seeding else None
        if CURRENT.salted_seeding:
            from sglang.srt.mem_cache import utils as sg_utils

            assert sg_utils.storage_namespace_seed(case["extra_key"], case["cache_salt"]) == case["seed"]
        chain = []
        for i in range(0, len(tokens), ps):
            prior = theirs(tokens[i : i + ps], prior)
            chain.append(prior)
        assert chain == case[rule], (case["extra_key"], case["cache_salt"], rule)
    if CURRENT.salted_seeding:
        from sglang.srt.mem_cache import utils as sg_utils

        for case in doc["cases"]:
            if case["cache_salt"] == "":  # RadixKey keeps an empty salt as None
                continue
            key = type("Key", (list,), {})(case["tokens"])
            key.extra_key, key.cache_salt = case["extra_key"], case["cache_salt"]
            try:
                got = sg_utils.get_storage_hash_str(key, None, ps)
            except TypeError:  # a native hash that takes plain lists only
                got = sg_utils.get_hash_str(
                    case["tokens"],
                    sg_utils.storage_namespace_seed(key.extra_key, key.cache_salt),
                    ps,
                )
            assert got == case["salted"], (case["extra_key"], case["cache_salt"])
