"""``clear()`` against a real ``moto_server`` removes exactly this instance's objects:
never a neighbour's -- models ``m`` / ``m_x`` / no model, namespaces ``p`` / ``p2``, key
prefixes ``p/`` / ``p2/`` in one bucket. A key prefix must end at ``/`` (``p`` would reach
``p2/``); the SGLang-compatible scheme refuses to clear and removes nothing."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hicache_backend_s3 import S3Config, S3Storage

from hicache_sdk import ClearRefusedError, ConfigError

torch = pytest.importorskip("torch")

from hicache_sdk.hostpool import MHAHostPool  # noqa: E402
from hicache_sdk.spec import HiCacheStorageConfig  # noqa: E402

PAGE = 4


def _all_keys(moto: Any, bucket: str) -> set[str]:
    out: set[str] = set()
    for page in moto.client().get_paginator("list_objects_v2").paginate(Bucket=bucket):
        out.update(o["Key"] for o in page.get("Contents", ()) if ".hicache-probe" not in o["Key"])
    return out


class _Store:
    """A backend with two pages written."""

    def __init__(
        self, listed: Callable[[], set[str]], cfg: dict[str, Any], model: str | None, **extra: Any
    ) -> None:
        self.s = S3Storage(HiCacheStorageConfig(model_name=model, extra_config={**cfg, **extra}), {})
        pool = MHAHostPool(8, PAGE, 1, 1, 8, dtype=torch.bfloat16, layout="page_first", pin_memory=False)
        self.s.register_mem_pool_host(pool)
        self.keys = [hashlib.sha256(f"{model}{extra}{i}".encode()).hexdigest() for i in range(2)]
        before = listed()
        assert self.s.batch_set_v1(self.keys, torch.arange(2 * PAGE)) == [True, True]
        self.objects = listed() - before  # what this instance wrote


@pytest.fixture
def make(s3cfg: dict[str, Any], moto: Any, bucket: str) -> Iterator[Any]:
    made: list[_Store] = []

    def make(model: str | None, **extra: Any) -> _Store:
        made.append(_Store(lambda: _all_keys(moto, bucket), s3cfg, model, **extra))
        return made[-1]

    yield make
    for st in made:
        st.s.close()


def _clears_only_its_own(moto: Any, bucket: str, stores: dict[Any, _Store], target: Any) -> None:
    me = stores[target]
    before = _all_keys(moto, bucket)
    assert len(me.objects) == 2 and me.objects <= before
    me.s.clear()
    assert _all_keys(moto, bucket) == before - me.objects
    assert me.s.batch_exists(me.keys) == 0
    for name, other in stores.items():  # every neighbour still serves its pages
        if name != target:
            assert other.s.batch_exists(other.keys) == 2, name


@pytest.mark.parametrize("target", ["m", "m_x", None])
def test_clear_removes_exactly_one_model(make: Any, moto: Any, bucket: str, target: str | None) -> None:
    stores = {m: make(m) for m in ("m", "m_x", None)}
    _clears_only_its_own(moto, bucket, stores, target)


@pytest.mark.parametrize("target", ["p", "p2"])
def test_clear_removes_exactly_one_namespace(make: Any, moto: Any, bucket: str, target: str) -> None:
    stores = {ns: make("m", namespace=ns) for ns in ("p", "p2")}
    _clears_only_its_own(moto, bucket, stores, target)


@pytest.mark.parametrize("target", ["p/", "p2/"])
def test_clear_removes_exactly_one_key_prefix(make: Any, moto: Any, bucket: str, target: str) -> None:
    stores = {p: make("m", prefix=p) for p in ("p/", "p2/")}
    _clears_only_its_own(moto, bucket, stores, target)
    # the transport's own clear of everything stays inside its key prefix too
    left = _all_keys(moto, bucket)
    stores[target].s.raw_transport.clear("")
    assert _all_keys(moto, bucket) == left
    assert left and all(not k.startswith(target) for k in left)


def test_a_key_prefix_must_end_at_a_delimiter() -> None:
    with pytest.raises(ConfigError, match=r"prefix must end with '/'.*'p/'"):
        S3Config.from_mapping({"bucket": "abc", "prefix": "p"}, environ={})
    assert S3Config.from_mapping({"bucket": "abc", "prefix": ""}, environ={}).prefix == ""
    assert S3Config.from_mapping({"bucket": "abc", "prefix": "a/b/"}, environ={}).prefix == "a/b/"


def test_sglang_scheme_refuses_and_removes_nothing(make: Any, moto: Any, bucket: str) -> None:
    st = make("m", key_scheme="sglang-mooncake", prefix="sg/")
    make("m_x", key_scheme="sglang-mooncake", prefix="sg/")
    before = _all_keys(moto, bucket)
    assert len(before) >= 4
    with pytest.raises(ClearRefusedError):
        st.s.clear()
    assert _all_keys(moto, bucket) == before
