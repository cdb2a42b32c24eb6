"""``batch_exists``'s names-only fast path (the KV pool's ``ExistsPlan``) against the checked
path it skips: the same hits, the same errors, the same wrong-sized objects deleted, the same
metrics -- for every key scheme, with and without sizes from the transport."""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paged_helpers import hkey, mha, mla, randomize, scattered_slots

import hicache_sdk.paged.adapter as adapter_mod
from hicache_sdk import SIZE_UNKNOWN
from hicache_sdk._ext import hotpath
from hicache_sdk.memory_backend import MemoryStorage, MemoryTransport, drop_store
from hicache_sdk.spec import HiCacheStorageConfig

pytestmark = pytest.mark.skipif(hotpath is None, reason="hicache_sdk._hotpath was not compiled")


class NoSizes(MemoryTransport):
    """Answers like Mooncake: present objects with an unknown size."""

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        return [None if s is None else SIZE_UNKNOWN for s in super().exists(keys)]


class NoSizesStorage(MemoryStorage):
    transport_cls = NoSizes

    def create_transport(self, config: Any) -> NoSizes:  # MemoryStorage's names MemoryTransport
        return NoSizes(store=config.store, capacity_bytes=config.capacity_bytes)


SCHEMES = ["default", "sglang-file", "sglang-mooncake"]


def _storage(scheme: str, kind: str, sizes: bool) -> tuple[MemoryStorage, str]:
    store = f"plan-{uuid.uuid4().hex}"
    cls = MemoryStorage if sizes else NoSizesStorage
    sc = HiCacheStorageConfig(
        model_name="m", is_mla_model=kind == "mla", extra_config={"store": store, "key_scheme": scheme}
    )
    s = cls(sc, {})
    assert type(s.raw_transport) is (MemoryTransport if sizes else NoSizes)
    s.register_mem_pool_host(randomize(mha() if kind == "mha" else mla(), 1))
    return s, store


KEY = st.one_of(
    st.integers(0, 5).map(hkey),  # SGLang's hashes: the fast path
    st.sampled_from(["plain-key", "a/b", "", "..", "é", "x\x01"]),
    st.sampled_from([None, 7, b"k"]),
)


def _outcome(s: MemoryStorage, keys: Any) -> tuple[str, object]:
    try:
        return "ok", s.batch_exists(keys)
    except Exception as e:  # the same error type and message on both paths
        return type(e).__name__, str(e)


@settings(max_examples=40)
@given(
    scheme=st.sampled_from(SCHEMES),
    kind=st.sampled_from(["mha", "mla"]),
    sizes=st.booleans(),
    stored=st.lists(st.booleans(), min_size=6, max_size=6),
    wrong=st.lists(st.booleans(), min_size=6, max_size=6),
    keys=st.one_of(st.lists(KEY, max_size=7), st.tuples(KEY, KEY), st.just("not-a-list")),
)
def test_fast_path_equals_the_checked_path(
    scheme: str, kind: str, sizes: bool, stored: list[bool], wrong: list[bool], keys: Any
) -> None:
    pair = [_storage(scheme, kind, sizes) for _ in range(2)]
    try:
        for s, _ in pair:  # identical contents: stored pages, and wrong-sized objects planted
            for i in range(6):
                if stored[i]:
                    assert s.batch_set_v1([hkey(i)], scattered_slots(s.mem_pool_host, 1, seed=i)) == [True]
                elif wrong[i]:
                    assert s._kv is not None
                    spec = s.scheme.page_columns([hkey(i)], s._kv.layout)
                    assert spec is not None
                    buf = ctypes.create_string_buffer(3)
                    s.raw_transport.write([spec[0][0][0]], [[(ctypes.addressof(buf), 3)]])
        fast, slow = pair[0][0], pair[1][0]
        assert fast._kv_exists is not None
        slow._kv_exists = None
        assert _outcome(fast, keys) == _outcome(slow, keys)
        # the same objects left (wrong-sized ones deleted alike), the same figures
        assert sorted(fast.raw_transport._store.objects) == sorted(slow.raw_transport._store.objects)  # type: ignore[attr-defined]
        snaps = [s.metrics.snapshot() for s in (fast, slow)]
        for snap in snaps:
            for op in snap["ops"].values():
                del op["seconds"], op["latency_counts"]
        assert snaps[0] == snaps[1]
    finally:
        for _, store in pair:
            drop_store(store)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_sglang_hashes_take_the_fast_path(scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    s, store = _storage(scheme, "mha" if scheme != "sglang-mooncake" else "mla", True)
    try:
        keys = [hkey(i) for i in range(4)]
        assert s.batch_set_v1(keys[:3], scattered_slots(s.mem_pool_host, 3)) == [True] * 3

        def no(*a: Any, **k: Any) -> None:
            raise AssertionError("the checked path ran")

        monkeypatch.setattr(adapter_mod, "build_columns", no)
        assert s.batch_exists(keys) == 3 and s.batch_exists(keys[:3]) == 3 and s.batch_exists([]) == 0
        monkeypatch.undo()
        with pytest.raises(ValueError, match="page_hash"):
            s.batch_exists(["a/b"])  # the checked path names what is wrong
        s.close()
        assert s.batch_exists(keys) == 0  # after close: a miss, as on the checked path
    finally:
        drop_store(store)
