"""``KeyScheme.name_plan``: the template of a pool's names (the names-only fast path of
``batch_exists``) must give exactly the names of ``page_columns``, vouch for SGLang's own
hashes, and never vouch for a batch the checked path refuses."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from key_layouts import INDEXER, MAMBA, MHA, MHA_LF, MLA, SWA_MHA

from hicache_sdk._ext import hotpath
from hicache_sdk.hostpool.layout import PoolLayout
from hicache_sdk.keys.schemes import make_scheme
from hicache_sdk.spec import HiCacheStorageConfig

pytestmark = pytest.mark.skipif(hotpath is None, reason="hicache_sdk._hotpath was not compiled")

SWA = SWA_MHA
POOLS = [MHA, MHA_LF, MLA, MAMBA, SWA, INDEXER]

CONFIGS = [
    ("default", {"model_name": "m"}, {}),
    ("default", {"model_name": "org/model", "tp_rank": 1, "tp_size": 2}, {"namespace": "ns"}),
    ("sglang-file", {"model_name": "m"}, {}),
    ("sglang-file", {"model_name": "m", "tp_rank": 1, "tp_size": 2, "pp_rank": 1, "pp_size": 2}, {}),
    ("sglang-mooncake", {"model_name": "bench"}, {}),
    ("sglang-mooncake", {"model_name": "m", "extra_config": {"extra_backend_tag": "t"}}, {}),
    ("sglang-mooncake", {"model_name": "m", "is_mla_model": True, "pp_rank": 1, "pp_size": 2}, {}),
    ("sglang-mooncake", {}, {}),
]


def _scheme(i: int):  # type: ignore[no-untyped-def]
    name, cfg, kw = CONFIGS[i]
    return make_scheme(name, HiCacheStorageConfig(**cfg), **kw)


def _flat(scheme, hashes: Sequence[str], pool: PoolLayout) -> list[str]:  # type: ignore[no-untyped-def]
    """``page_columns``' names, column-major (the checked path)."""
    cols = scheme.page_columns(hashes, pool)
    if cols is None:  # one object per page (page_names)
        return [o.name for h in hashes for o in scheme.page_objects(h, pool)]
    return [n for names, _ in cols for n in names]


HEX64 = st.text("0123456789abcdef", min_size=64, max_size=64)
PLAIN = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=80)
ODD = st.one_of(
    st.just(""),
    st.just(".."),
    st.just("a/b"),
    st.just("a\\b"),
    st.just("x\x00y"),
    st.just("é" * 3),
    st.just("A" * 64),
    st.text(max_size=20),
)
KEY = st.one_of(HEX64, PLAIN, ODD)


@given(i=st.integers(0, len(CONFIGS) - 1), pool=st.sampled_from(POOLS), keys=st.lists(KEY, max_size=6))
def test_plan_names_are_page_columns_names_or_the_checked_path_decides(
    i: int, pool: PoolLayout, keys: list[str]
) -> None:
    scheme = _scheme(i)
    plan = scheme.name_plan(pool)
    if plan is None:  # no plan: the scheme refuses the pool, or has no template for it
        with pytest.raises(ValueError):
            scheme.page_objects("0" * 64, pool)
        return
    got = plan.names(keys)
    if got is not None:  # vouched for: the checked path accepts the batch and agrees
        assert got == _flat(scheme, keys, pool)
        return
    try:  # not vouched for: the checked path refuses it, or accepts text C does not check
        _flat(scheme, keys, pool)
    except ValueError:
        return
    # C vouches for printable ASCII only; the plain-fragment rule also admits other text
    assert not plan.hex_only and any(not k.isascii() for k in keys)


@given(i=st.integers(0, len(CONFIGS) - 1), pool=st.sampled_from(POOLS), keys=st.lists(HEX64, max_size=8))
def test_plan_vouches_for_sglang_hashes(i: int, pool: PoolLayout, keys: list[str]) -> None:
    """SGLang's own page hashes (64 lowercase hex) always take the fast path."""
    scheme = _scheme(i)
    plan = scheme.name_plan(pool)
    if plan is None:
        return
    got = plan.names(keys)
    assert got is not None and got == _flat(scheme, keys, pool)
    assert plan.names(tuple(keys)) == got  # a tuple too


def test_plan_refuses_what_is_not_a_list_of_str() -> None:
    plan = _scheme(4).name_plan(MHA)
    assert plan is not None
    h = "0" * 64
    assert plan.names([h]) == [f"bench_{h}_0_k", f"bench_{h}_0_v"]
    for bad in ([h, 1], [h, None], iter([h]), h, {h}, [b"0" * 64], [type("S", (str,), {})(h)]):
        assert plan.names(bad) is None, bad


def test_no_plan_for_logical_pools_refused_pools_or_a_bound_name_rule() -> None:
    mc = _scheme(4)
    assert mc.name_plan(MHA_LF) is None  # sglang-mooncake refuses MHA layer_first
    assert mc.name_plan(dataclasses.replace(MHA, has_buffer=False)) is None

    class Rule:
        @staticmethod
        def check_names(names: Sequence[str]) -> None:
            pass

    for i in (0, 2, 4):
        s = _scheme(i)
        assert s.name_plan(MHA) is not None
        s.bind_transport(Rule())  # the transport's rule must see every name: no template
        assert s.name_plan(MHA) is None


@pytest.mark.parametrize("i", range(len(CONFIGS)))
@pytest.mark.parametrize("bad", ["a/b", "/abs", "a\\b", "..", "a..b", "", "x\x00y", "x\x1fy", "x\x7fy"])
def test_plan_never_vouches_for_a_key_the_checked_path_refuses(i: int, bad: str) -> None:
    scheme = _scheme(i)
    plan = scheme.name_plan(MHA) or scheme.name_plan(MLA)
    assert plan is not None
    good = "0" * 64
    with pytest.raises(ValueError):
        _flat(scheme, [good, bad], MHA if scheme.name_plan(MHA) else MLA)
    assert plan.names([bad]) is None and plan.names([good, bad]) is None and plan.names((bad, good)) is None
