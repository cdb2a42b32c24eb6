"""L1 semantics of KV pages, on every I/O path SGLang 0.5.23 takes for the backend.

``contract`` tests drive the backend the way SGLang's controller does
(:class:`~hicache_conformance.sglang_path.Controller`: backups and prefetches in batches of
at most 128 pages, the leading run of hits committed, ``all()`` of write results): byte
exact round trips over the host-pool matrix, misses, >128-page spans, leading-run
existence, the rewrite rule. ``strict`` adds what SGLang never asks: empty batches,
duplicate keys in a batch, first write wins, per-key results after a miss, single-key
``get`` / ``set`` / ``exists``.
"""

from __future__ import annotations

import torch

from hicache_sdk.spec import STORAGE_BATCH_SIZE

from .. import pools as P
from ..base import BackendFactory, SuiteBase
from ..capabilities import level, requires, strict_only
from ..explain import describe_page, describe_pages
from ..matrix import PoolCase


class SemanticsTests(SuiteBase):
    @level(1)
    def test_get_after_set_is_byte_exact(
        self, backend_factory: BackendFactory, pool_case: PoolCase, io_path: str
    ) -> None:
        """Five pages backed up and prefetched the way SGLang does it read back byte
        exact (SGLang: ``_page_backup`` then ``_page_transfer`` on this I/O path)."""
        att = self.attach(backend_factory(storage_config=self.storage_config_for(pool_case)), pool_case)
        keys = self.keys(backend_factory.namespace, "exact", 5)
        data = self.store(att, keys, 0, path=io_path)
        self.expect_pages(att, keys, data, 10, io_path)

    @level(1)
    @strict_only(
        "SGLang 0.5.23's controller never calls the single-key get / set / exists; the SDK's own "
        "tools and bridges do, and a backend that answers them wrongly misleads every such caller"
    )
    def test_legacy_get_set_is_byte_exact(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        key, other = self.keys(backend_factory.namespace, "legacy", 2)
        data = P.fill_page(att.kv, 0, key)
        assert att.backend.set(key, att.kv.get_data_page(0, flat=True)) is True, "set() of a new page"
        assert att.backend.exists(key) is True, "exists() of a page just set"
        got = att.backend.get(key, att.kv.get_dummy_flat_data_page())
        assert got is not None, "get() of a page just set is a miss"
        line = describe_page(f"get({key[:12]}…)", data, P._as_bytes(got))
        assert not line, line
        assert att.backend.get(other, att.kv.get_dummy_flat_data_page()) is None, "get() of a missing page"
        assert att.backend.exists(other) is False, "exists() of a missing page"

    @level(1)
    def test_get_returns_each_pages_own_bytes(self, backend_factory: BackendFactory, io_path: str) -> None:
        """Eight distinct pages come back each in its own place, also in reverse order."""
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        keys = self.keys(backend_factory.namespace, "own", 8)
        data = self.store(att, keys, 0, path=io_path)
        self.expect_pages(att, keys, data, 20, io_path)
        self.expect_pages(
            att,
            list(reversed(keys)),
            list(reversed(data)),
            40,
            io_path,
            what="the same pages in reverse order",
        )

    @level(1)
    def test_missing_page_is_a_miss(self, backend_factory: BackendFactory, io_path: str) -> None:
        """A page never written is a miss on every query SGLang makes, never an exception
        and never a hit."""
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        (missing,) = self.keys(backend_factory.namespace, "missing", 1)
        b = att.backend
        assert b.batch_exists([missing]) == 0, "batch_exists of a page never written is not 0"
        ctl = self.controller(att, io_path)
        got = ctl.prefetch([missing], 0)
        assert got == 0, f"SGLang's prefetch committed {got} page(s) never written:\n{ctl.story()}"
        raised = [c for c in ctl.calls if c.error is not None]
        assert not raised, f"a read of a missing page raised instead of missing:\n{ctl.story()}"
        if self.capabilities_of().hybrid_pools:
            res = b.batch_exists_v2([missing], [])
            assert res.kv_hit_pages == 0, f"batch_exists_v2 of a page never written: {res!r}"

    @level(1)
    @strict_only(
        "SGLang never sends an empty get or set batch (its controller cuts spans into batches of 1..128 "
        "pages), but other callers do: an empty batch must answer [] / True / 0, not raise"
    )
    def test_empty_batches(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        b = att.backend
        empty = torch.empty(0, dtype=torch.int64)
        assert b.batch_exists([]) == 0, "batch_exists([])"
        assert b.batch_get([], []) in ([], 0), "batch_get([], [])"
        assert b.batch_set([], []) is True, "batch_set([], [])"
        if self.capabilities_of().zero_copy:
            assert b.batch_get_v1([], empty) == [], "batch_get_v1([], empty)"
            assert b.batch_set_v1([], empty) == [], "batch_set_v1([], empty)"

    @level(1)
    @strict_only(
        "page keys are chained hashes of token IDs, so SGLang never repeats a key within one batch; "
        "a batch from another caller may, and the first copy must win, whole"
    )
    def test_duplicate_keys_in_one_batch(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        a, b = self.keys(backend_factory.namespace, "dup", 2)
        # the two copies of `a` differ: the first written must be the one kept
        ok, data = self.write(att, [a, b, a], 0, seeds=[a, b, f"{a}-second-copy"])
        assert ok == [True, True, True], f"a batch [a, b, a] reported {ok}"
        assert data[0] != data[2]
        got = self.read(att, [a, a, b], 10)
        assert got[0] != data[2], "a later copy of a duplicate key replaced the first (the first write wins)"
        want = [data[0], data[0], data[1]]
        assert got == want, describe_pages([a, a, b], want, got)

    @level(1)
    def test_batch_larger_than_storage_batch_size(self, backend_factory: BackendFactory) -> None:
        """A span of 133 pages: SGLang backs it up and prefetches it in batches of 128 and 5
        (``STORAGE_BATCH_SIZE``), and queries it with ``batch_exists`` over the whole span
        (``HybridCacheController._storage_hit_query``). On the route's first path only:
        every call the backend sees is a batch of at most 128 pages on either path."""
        io_path = self.primary_path()
        case = PoolCase(page_size=1)
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        n = STORAGE_BATCH_SIZE + 5
        keys = self.keys(backend_factory.namespace, "big", n)
        data = self.store(att, keys, 0, path=io_path)
        whole = att.backend.batch_exists(keys)
        assert whole == n, f"batch_exists over the whole {n}-page span reports {whole}"
        self.expect_pages(att, keys, data, 150, io_path)

    @level(1)
    def test_rewrite_returns_true_and_reads_one_version(
        self, backend_factory: BackendFactory, io_path: str
    ) -> None:
        """A backup of pages that already exist must succeed (SGLang stops the rest of a
        backup at a batch that fails: ``cache_controller.py`` ``_page_backup``), and a reader
        sees one version of each page, whole: the first or the second (a rewrite may store
        other bytes: kernels that are not batch-invariant recompute the same prefix
        slightly differently)."""
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        keys = self.keys(backend_factory.namespace, "rewrite", 2)
        first = self.store(att, keys, 0, seeds=[f"first-{k}" for k in keys], path=io_path)
        second = self.store(att, keys, 2, seeds=[f"second-{k}" for k in keys], path=io_path)
        for i in range(2):
            P.zero_page(att.kv, 10 + i)
        ctl = self.controller(att, io_path)
        n = ctl.prefetch(keys, 10)
        assert n == 2, f"after a rewrite SGLang's prefetch committed {n} of 2 pages:\n{ctl.story()}"
        for i, k in enumerate(keys):
            got = P.page_bytes(att.kv, 10 + i)
            assert got in (first[i], second[i]), (
                "a rewritten page is neither version, whole: "
                + describe_page(f"page {i} ({k[:12]}…) vs the first version", first[i], got)
            )

    @level(1)
    @strict_only(
        "SGLang relies only on a rewrite returning True, but the SDK promises create-if-absent: the "
        "first write wins, so readers on other instances never see a page change under them"
    )
    def test_set_existing_page_keeps_original(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        (key,) = self.keys(backend_factory.namespace, "exist", 1)
        _, first = self.write(att, [key], 0, seeds=["first"])
        ok, _ = self.write(att, [key], 1, seeds=["second"])
        assert ok == [True], f"a write of an existing page reported {ok}"
        got = self.read(att, [key], 2)
        assert got == first, "a write of an existing page changed its bytes: " + describe_pages(
            [key], first, got
        )

    @level(1)
    def test_batch_exists_counts_leading_run_only(self, backend_factory: BackendFactory) -> None:
        """``batch_exists`` counts the pages present from the start of the list up to the
        first absent one (SGLang: ``_storage_hit_query`` uses the count as the hit)."""
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        k = self.keys(backend_factory.namespace, "run", 4)
        self.store(att, [k[0], k[1], k[3]], 0)
        for probe, want in (([*k], 2), ([k[2], k[0], k[1]], 0), ([k[3]], 1)):
            got = att.backend.batch_exists(probe)
            present = ["yes" if p != k[2] else "no" for p in probe]
            assert got == want, f"batch_exists over pages present={present} returned {got}, expected {want}"

    @level(1)
    def test_read_commits_the_leading_run_of_hits(
        self, backend_factory: BackendFactory, io_path: str
    ) -> None:
        """A read of [present, missing, present] commits the first page at most, with its
        bytes: SGLang uses the leading run of hits and nothing after the first miss
        (``_generic_page_get`` / ``_page_get_zero_copy``). Exactly the first page is a
        ``strict`` rule (see :meth:`assert_leading_run`)."""
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        k = self.keys(backend_factory.namespace, "lead", 3)
        data = self.store(att, [k[0], k[2]], 0, path=io_path)
        P.zero_page(att.kv, 10)
        ctl = self.controller(att, io_path)
        n = ctl.prefetch(k, 10)
        self.assert_leading_run(n, 1, f"[present, missing, present]: SGLang's prefetch\n{ctl.story()}\n")
        if n:
            line = describe_page(f"page 0 ({k[0][:12]}…)", data[0], P.page_bytes(att.kv, 10))
            assert not line, line

    @level(1)
    @requires("zero_copy")
    @strict_only(
        "SGLang uses only the leading run of v1 results; other callers (the SDK's tools) read every "
        "result, so a hit after a miss must be reported as such, with its bytes"
    )
    def test_v1_results_are_per_key(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        k = self.keys(backend_factory.namespace, "perkey", 3)
        _, data = self.write(att, [k[0], k[2]], 0, path="v1")
        ok, _ = self.write(att, [k[0], k[2]], 0, path="v1")
        assert ok == [True, True], f"batch_set_v1 per-key results {ok}"
        got = self.read(att, k, 10, path="v1")
        want = [data[0], None, data[1]]
        assert got == want, describe_pages(k, want, got)
