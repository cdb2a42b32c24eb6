"""The batch naming fast paths (``page_names``) give exactly the per-page names and reject
exactly the hashes the per-page path rejects."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk.hostpool.layout import PoolLayout
from hicache_sdk.keys.schemes import make_scheme
from hicache_sdk.spec import HiCacheStorageConfig

_LAYOUT = PoolLayout(
    name="kv",
    kind="mha",
    layout="page_first",
    dtype="bfloat16",
    page_size=4,
    segment_sizes=(1024, 1024),
    flat_order=(0, 1),
    geometry=(("layer_num", 1),),
)
_HEX = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
_ANY = st.one_of(_HEX, st.text(alphabet=st.sampled_from(list("0aF/.\\\x00\n -_")), max_size=70))


def _per_page(scheme_name: str, hashes: list[str], pool: PoolLayout) -> list[str] | type[ValueError]:
    s = make_scheme(scheme_name, HiCacheStorageConfig(model_name="org/m", tp_size=2, tp_rank=1))
    try:
        return [o.name for h in hashes for o in s.page_objects(h, pool)]
    except ValueError:
        return ValueError


@pytest.mark.parametrize("scheme_name", ["default", "sglang-file"])
@pytest.mark.parametrize("pool_name", ["kv", "mamba", "swa"])
@given(hashes=st.lists(_ANY, min_size=1, max_size=5))
def test_page_names_equal_page_objects(scheme_name: str, pool_name: str, hashes: list[str]) -> None:
    pool = dataclasses.replace(_LAYOUT, name=pool_name)
    s = make_scheme(scheme_name, HiCacheStorageConfig(model_name="org/m", tp_size=2, tp_rank=1))
    want = _per_page(scheme_name, hashes, pool)
    if want is ValueError:
        with pytest.raises(ValueError):
            s.page_names(hashes, pool)  # type: ignore[attr-defined]
    else:
        assert s.page_names(hashes, pool) == want  # type: ignore[attr-defined]


def test_page_names_logical_pool_and_known_name() -> None:
    s = make_scheme("default", HiCacheStorageConfig(model_name="org/m"))
    h = "ab" + "0" * 62
    assert s.page_names([h], dataclasses.replace(_LAYOUT, has_buffer=False)) == []  # type: ignore[attr-defined]
    (name,) = s.page_names([h], _LAYOUT)  # type: ignore[attr-defined]
    assert name.startswith("_/org%2Fm/kv-") and name.endswith(f"/ab/{h}")
    with pytest.raises(ValueError, match="page_hash"):
        s.page_names([h, h.upper()], _LAYOUT)  # type: ignore[attr-defined]
