"""L1 semantics of KV pages: byte-exact round trips, misses, empty and duplicate
batches, big batches, create-if-absent, leading-run existence, per-key results."""

from __future__ import annotations

import torch

from hicache_sdk.spec import STORAGE_BATCH_SIZE

from .. import pools as P
from ..base import BackendFactory, SuiteBase
from ..capabilities import level, requires
from ..matrix import PoolCase


class SemanticsTests(SuiteBase):
    @level(1)
    def test_get_after_set_is_byte_exact(self, backend_factory: BackendFactory, pool_case: PoolCase) -> None:
        att = self.attach(backend_factory(storage_config=self.storage_config_for(pool_case)), pool_case)
        keys = self.keys(backend_factory.namespace, "exact", 5)
        ok, data = self.write(att, keys, 0)
        assert ok == [True] * 5
        assert self.read(att, keys, 10) == data

    @level(1)
    def test_legacy_get_set_is_byte_exact(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        key, other = self.keys(backend_factory.namespace, "legacy", 2)
        data = P.fill_page(att.kv, 0, key)
        assert att.backend.set(key, att.kv.get_data_page(0, flat=True)) is True
        assert att.backend.exists(key) is True
        got = att.backend.get(key, att.kv.get_dummy_flat_data_page())
        assert got is not None and P._as_bytes(got) == data
        assert att.backend.get(other, att.kv.get_dummy_flat_data_page()) is None

    @level(1)
    def test_get_returns_each_pages_own_bytes(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        keys = self.keys(backend_factory.namespace, "own", 8)
        _, data = self.write(att, keys, 0)
        got = self.read(att, keys, 20)
        for i, (g, d) in enumerate(zip(got, data)):
            assert g == d, f"page {i} read back bytes that are not its own"
        assert self.read(att, list(reversed(keys)), 40) == list(reversed(data))

    @level(1)
    def test_missing_page_is_a_miss(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        (missing,) = self.keys(backend_factory.namespace, "missing", 1)
        b = att.backend
        assert b.exists(missing) is False
        assert b.batch_exists([missing]) == 0
        assert b.get(missing, att.kv.get_dummy_flat_data_page()) is None
        assert b.batch_get([missing], [att.kv.get_dummy_flat_data_page()]) in ([None], 0)
        assert self.read(att, [missing], 0) == [None]
        if self.capabilities_of().hybrid_pools:
            assert b.batch_exists_v2([missing], []).kv_hit_pages == 0

    @level(1)
    def test_empty_batches(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        b = att.backend
        empty = torch.empty(0, dtype=torch.int64)
        assert b.batch_exists([]) == 0
        assert b.batch_get([], []) in ([], 0)
        assert b.batch_set([], []) is True
        if self.capabilities_of().zero_copy:
            assert b.batch_get_v1([], empty) == []
            assert b.batch_set_v1([], empty) == []
        if self.capabilities_of().hybrid_pools:
            assert b.batch_exists_v2([], []).kv_hit_pages == 0

    @level(1)
    def test_duplicate_keys_in_one_batch(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        a, b = self.keys(backend_factory.namespace, "dup", 2)
        # the two copies of `a` differ: the first written must be the one kept
        ok, data = self.write(att, [a, b, a], 0, seeds=[a, b, f"{a}-second-copy"])
        assert ok == [True, True, True]
        assert data[0] != data[2]
        got = self.read(att, [a, a, b], 10)
        assert got[0] != data[2], "a later copy of a duplicate key replaced the first (the first write wins)"
        assert got == [data[0], data[0], data[1]]

    @level(1)
    def test_batch_larger_than_storage_batch_size(self, backend_factory: BackendFactory) -> None:
        case = PoolCase(page_size=1)
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        n = STORAGE_BATCH_SIZE + 5
        keys = self.keys(backend_factory.namespace, "big", n)
        ok, data = self.write(att, keys, 0)
        assert ok == [True] * n
        assert att.backend.batch_exists(keys) == n
        assert self.read(att, keys, 150) == data

    @level(1)
    def test_set_existing_page_keeps_original(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        (key,) = self.keys(backend_factory.namespace, "exist", 1)
        _, first = self.write(att, [key], 0, seeds=["first"])
        ok, _ = self.write(att, [key], 1, seeds=["second"])
        assert ok == [True], "a write of an existing page must succeed"
        assert self.read(att, [key], 2) == first, "a write of an existing page changed its bytes"

    @level(1)
    def test_batch_exists_counts_leading_run_only(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        k = self.keys(backend_factory.namespace, "run", 4)
        self.write(att, [k[0], k[1], k[3]], 0)
        assert att.backend.batch_exists(k) == 2
        assert att.backend.batch_exists([k[2], k[0], k[1]]) == 0
        assert att.backend.batch_exists([k[3]]) == 1

    @level(1)
    @requires("zero_copy")
    def test_v1_results_are_per_key(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        k = self.keys(backend_factory.namespace, "perkey", 3)
        _, data = self.write(att, [k[0], k[2]], 0)
        assert self.read(att, k, 10) == [data[0], None, data[1]]
