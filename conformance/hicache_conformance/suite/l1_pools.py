"""L1 semantics across pools and identities: sidecar pools through v2 (span-wide, as
SGLang's hybrid controller sends them), the ALL_PAGES / TRAILING_PAGES endpoint vectors
of SGLang 0.5.23 through the real backend, sidecar runs shorter than the KV run and a
missing indexer (the committed hit is the minimum), and (default key scheme) isolation /
sharing between deployments."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from hicache_sdk.spec import PoolHitPolicy, PoolName, PoolTransfer, count_pool_hits

from .. import pools as P
from ..base import Attached, BackendFactory, SuiteBase
from ..capabilities import level, requires, strict_only
from ..explain import describe_pages
from ..matrix import PoolCase

_POLICY = {"indexer": PoolHitPolicy.ALL_PAGES, "swa": PoolHitPolicy.TRAILING_PAGES}


def _transfer(att: Attached, name: str, keys: list[str], first_page: int) -> PoolTransfer:
    pool = att.pools[name]
    return PoolTransfer(
        name=PoolName(name),
        host_indices=P.host_indices(pool, first_page, len(keys)),
        keys=list(keys),
        hit_policy=_POLICY[name],
        indices_from_pool=PoolName.KV if name == "indexer" else None,
    )


def _hits(res: object, name: str) -> int:
    """The pages SGLang counts from a v2 result: the leading run of ``True`` of the pool
    (``count_pool_hits``, as ``_page_backup_with_stable_layout`` and
    ``_page_transfer_sidecar`` use it)."""
    assert isinstance(res, dict), f"a v2 call returned {res!r}, not a dict of per-pool results"
    return int(count_pool_hits({str(getattr(k, "value", k)): v for k, v in res.items()}).get(name, 0))


class PoolTests(SuiteBase):
    def _v2_put(self, att: Attached, name: str, keys: list[str], first_page: int) -> list[bytes]:
        data = [P.fill_page(att.pools[name], first_page + i, f"{name}:{k}") for i, k in enumerate(keys)]
        res = att.backend.batch_set_v2([_transfer(att, name, keys, first_page)])
        assert _hits(res, name) == len(keys), (
            f"batch_set_v2 of {len(keys)} {name} pages returned {res!r}: SGLang counts the leading run of "
            f"True as written"
        )
        return data

    def _v2_get(self, att: Attached, name: str, keys: list[str], first_page: int) -> tuple[int, list[bytes]]:
        for i in range(len(keys)):
            P.zero_page(att.pools[name], first_page + i)
        res = att.backend.batch_get_v2([_transfer(att, name, keys, first_page)])
        n = _hits(res, name)
        return n, [P.page_bytes(att.pools[name], first_page + i) for i in range(n)]

    @level(1)
    @requires("hybrid_pools")
    @pytest.mark.parametrize("sidecar", ["indexer", "swa"])
    def test_sidecar_pool_round_trip(
        self, backend_factory: BackendFactory, pool_case: PoolCase, sidecar: str
    ) -> None:
        att = self.attach(
            backend_factory(storage_config=self.storage_config_for(pool_case)), pool_case, (sidecar,)
        )
        keys = self.keys(backend_factory.namespace, "side", 3)
        self.store(att, keys, 0)
        data = self._v2_put(att, sidecar, keys, 0)
        n, got = self._v2_get(att, sidecar, keys, 10)
        assert n == 3 and got == data, (
            f"{sidecar} pages read back through batch_get_v2: {n} of 3 hit\n"
            + describe_pages(keys[:n], data[:n], got)
        )
        (missing,) = self.keys(backend_factory.namespace, "side-missing", 1)
        n, got = self._v2_get(att, sidecar, [keys[0], missing], 20)
        self.assert_leading_run(n, 1, f"batch_get_v2 of [{sidecar} page present, never written]")
        assert got == data[:n], f"{sidecar} page read back wrong:\n" + describe_pages(keys[:n], data[:n], got)

    @level(1)
    @requires("hybrid_pools")
    @strict_only(
        "SGLang never sends an empty v2 transfer (a prefetch with a 0-page hit is revoked or terminated "
        "before _sync_trailing_keys could empty a trailing transfer); other callers may, and it must answer "
        "an empty result, not raise"
    )
    def test_v2_empty_transfers(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case, ("swa",))
        b = att.backend
        assert b.batch_get_v2([]) == {}, "batch_get_v2([])"
        assert b.batch_exists_v2([], []).kv_hit_pages == 0, "batch_exists_v2([], [])"
        empty = PoolTransfer(
            PoolName.SWA,
            host_indices=torch.empty(0, dtype=torch.int64),
            keys=[],
            hit_policy=PoolHitPolicy.TRAILING_PAGES,
        )
        res = b.batch_get_v2([empty])
        assert _hits(res, "swa") == 0 and all(len(v) == 0 for v in res.values()), (
            f"an empty swa transfer: {res!r}"
        )

    # (kv pages present, indexer pages, swa pages, swa window, expected hit, restorable)
    VECTORS: tuple[tuple[int, tuple[int, ...], tuple[int, ...], int, int, list[int] | None], ...] = (
        (4, (0, 1), (), 0, 2, [1, 2]),
        (2, (0, 1, 2, 3), (), 0, 2, [1, 2]),
        (4, (), (2, 3), 2, 4, [4]),
        (4, (), (0, 1), 2, 2, [1, 2]),
        (4, (), (), 2, 0, []),
        (4, (0, 1, 2), (2, 3), 1, 3, [3]),
        (4, (0, 1, 2, 3), (1, 2), 2, 3, [3]),
    )

    @level(1)
    @requires("hybrid_pools")
    @pytest.mark.parametrize("vector", range(len(VECTORS)))
    def test_v2_exists_endpoint_vectors(self, backend_factory: BackendFactory, vector: int) -> None:
        kv_n, idx_pages, swa_pages, window, hit, restorable = self.VECTORS[vector]
        case = PoolCase(page_size=2)
        att = self.attach(
            backend_factory(storage_config=self.storage_config_for(case)), case, ("indexer", "swa")
        )
        keys = self.keys(backend_factory.namespace, f"vec{vector}", 4)
        self.store(att, keys[:kv_n], 0)
        if idx_pages:
            self._v2_put(att, "indexer", [keys[i] for i in idx_pages], 0)
        if swa_pages:
            self._v2_put(att, "swa", [keys[i] for i in swa_pages], 0)
        transfers = []
        if idx_pages:
            transfers.append(
                PoolTransfer(PoolName.INDEXER, keys=list(keys), hit_policy=PoolHitPolicy.ALL_PAGES)
            )
        if window:
            transfers.append(
                PoolTransfer(
                    PoolName.SWA, keys=["__placeholder__"] * window, hit_policy=PoolHitPolicy.TRAILING_PAGES
                )
            )
        result = att.backend.batch_exists_v2(keys, transfers)
        what = (
            f"KV pages 0..{kv_n - 1} stored, indexer pages {list(idx_pages)}, swa pages {list(swa_pages)}, "
            f"swa window {window}"
        )
        assert result.kv_hit_pages == hit, (
            f"{what}: kv_hit_pages {result.kv_hit_pages}, expected {hit} ({result!r})"
        )
        if result.restorable_prefix_pages is not None:
            assert list(result.restorable_prefix_pages) == restorable, (
                f"{what}: restorable_prefix_pages {list(result.restorable_prefix_pages)}, expected {restorable}"
            )

    @level(1)
    @requires("hybrid_pools")
    @pytest.mark.parametrize("sidecar", ["indexer", "swa"])
    def test_v2_sidecar_run_shorter_than_kv_commits_the_minimum(
        self, backend_factory: BackendFactory, sidecar: str
    ) -> None:
        """A sidecar run shorter than the KV run: the committed hit is the minimum and no
        page past it is used. SGLang users saw garbled output when a sidecar pool was loaded
        shorter than the KV (https://github.com/sgl-project/sglang/issues/31108).

        KV pages 0..5 are stored, the sidecar only for pages 0..2. ``batch_exists_v2`` must
        report a KV hit of 3 (indexer, ALL_PAGES: pages 0..2; swa, TRAILING_PAGES with a
        2-page window: the endpoints 1..3); ``batch_get_v2`` of the sidecar over all six
        pages must count exactly 3 leading hits (a page past the run is never a hit), and
        SGLang's prefetch of the KV with the KV-derived indexer commits 3 pages
        (``_page_transfer_kv_batch`` clamps to the minimum)."""
        case = PoolCase(page_size=2)
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case, (sidecar,))
        keys = self.keys(backend_factory.namespace, f"short-{sidecar}", 6)
        self.store(att, keys, 0)
        side = self._v2_put(att, sidecar, keys[:3], 0)
        if sidecar == "indexer":
            query = PoolTransfer(
                PoolName.INDEXER,
                keys=list(keys),
                hit_policy=PoolHitPolicy.ALL_PAGES,
                indices_from_pool=PoolName.KV,
            )
        else:
            query = PoolTransfer(
                PoolName.SWA, keys=["__window__"] * 2, hit_policy=PoolHitPolicy.TRAILING_PAGES
            )
        result = att.backend.batch_exists_v2(keys, [query])
        assert result.kv_hit_pages == 3, (
            f"KV pages 0..5 stored, {sidecar} pages 0..2: batch_exists_v2 reports kv_hit_pages "
            f"{result.kv_hit_pages}, expected 3 (the minimum of the runs) ({result!r})"
        )
        n, got = self._v2_get(att, sidecar, keys, 20)
        self.assert_leading_run(n, 3, f"batch_get_v2 of {sidecar} pages 0..5 (only 0..2 stored)")
        assert got == side[:n], "the sidecar pages of the run read back wrong:\n" + describe_pages(
            keys[:n], side[:n], got
        )
        if sidecar == "indexer":
            ctl = self.controller(att)
            committed = ctl.prefetch(keys, 40, kv_derived=("indexer",))
            self.assert_leading_run(
                committed,
                3,
                f"SGLang's prefetch of 6 KV pages with the indexer stored for 3\n{ctl.story()}\n",
            )

    @level(1)
    @requires("hybrid_pools")
    def test_v2_missing_indexer_is_no_hit(self, backend_factory: BackendFactory) -> None:
        """KV pages whose indexer buffer was never persisted are no hit at all: the
        committed hit is the minimum (0) and no KV page is used. Mooncake stored the KV but
        not the indexer and SGLang served garbled output
        (https://github.com/kvcache-ai/Mooncake/issues/2236)."""
        case = PoolCase(page_size=2)
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case, ("indexer",))
        keys = self.keys(backend_factory.namespace, "no-indexer", 4)
        self.store(att, keys, 0)
        query = PoolTransfer(
            PoolName.INDEXER,
            keys=list(keys),
            hit_policy=PoolHitPolicy.ALL_PAGES,
            indices_from_pool=PoolName.KV,
        )
        result = att.backend.batch_exists_v2(keys, [query])
        assert result.kv_hit_pages == 0, (
            f"KV pages 0..3 stored, no indexer page: batch_exists_v2 reports kv_hit_pages {result.kv_hit_pages}, "
            f"expected 0 ({result!r})"
        )
        n, _ = self._v2_get(att, "indexer", keys, 20)
        assert n == 0, f"batch_get_v2 of indexer pages never written counts {n} hits"
        ctl = self.controller(att)
        committed = ctl.prefetch(keys, 40, kv_derived=("indexer",))
        assert committed == 0, (
            f"SGLang's prefetch of 4 KV pages without their indexer committed {committed}, expected 0:\n{ctl.story()}"
        )

    # -- isolation / sharing under the default key scheme ------------------------------------
    def _require_default_scheme(self) -> None:
        scheme = self.config.get("key_scheme", "default")
        if scheme != "default":
            pytest.skip(f"key scheme {scheme!r}: isolation rules apply to the default scheme only")

    def _visible(
        self,
        factory: BackendFactory,
        writer: tuple[PoolCase, dict[str, Any]],
        reader: tuple[PoolCase, dict[str, Any]],
    ) -> bool:
        self._require_default_scheme()
        wc, wf = writer
        rc, rf = reader
        w = self.attach(factory(storage_config=self.storage_config_for(wc, **wf)), wc)
        r = self.attach(factory(storage_config=self.storage_config_for(rc, **rf)), rc)
        keys = self.keys(factory.namespace, "iso", 2)
        ok, data = self.write(w, keys, 0)
        assert ok == [True, True]
        n = r.backend.batch_exists(keys)
        got = self.read(r, keys, 10)
        if n == 0:
            assert got == [None, None], "batch_exists says absent but the pages were readable"
            return False
        assert n == 2 and got == data, f"shared pages must read back exactly (exists={n})"
        return True

    @level(1)
    @pytest.mark.parametrize(
        "what,writer,reader",
        [
            ("model", (PoolCase(), {"model_name": "m-a"}), (PoolCase(), {"model_name": "m-b"})),
            ("dtype", (PoolCase(dtype="bfloat16"), {}), (PoolCase(dtype="float16"), {})),
            ("layout", (PoolCase(layout="page_first"), {}), (PoolCase(layout="layer_first"), {})),
            (
                "mha-rank",
                (PoolCase(), {"tp_rank": 0, "tp_size": 2}),
                (PoolCase(), {"tp_rank": 1, "tp_size": 2}),
            ),
        ],
        ids=["model", "dtype", "layout", "mha-rank"],
    )
    @strict_only(
        "the default key scheme promises geometry-isolating keys: a page written under page_first "
        "and served to a layer_first pool (or another dtype, model or MHA rank) is silently wrong KV"
    )
    def test_default_scheme_isolates(
        self, backend_factory: BackendFactory, what: str, writer: Any, reader: Any
    ) -> None:
        assert not self._visible(backend_factory, writer, reader), f"pages leaked across {what}"

    @level(1)
    @pytest.mark.parametrize(
        "what,writer,reader",
        [
            (
                "mla-rank",
                (PoolCase(kind="mla"), {"tp_rank": 0, "tp_size": 2}),
                (PoolCase(kind="mla"), {"tp_rank": 1, "tp_size": 2}),
            ),
            ("dp-replica", (PoolCase(), {"dp_rank": 0}), (PoolCase(), {"dp_rank": 1})),
        ],
        ids=["mla-rank", "dp-replica"],
    )
    @strict_only(
        "the default key scheme promises that rank-replicated MLA pages and data-parallel replicas "
        "share one object: otherwise every rank and replica stores and fetches its own copy"
    )
    def test_default_scheme_shares(
        self, backend_factory: BackendFactory, what: str, writer: Any, reader: Any
    ) -> None:
        if what == "mla-rank" and not self.capabilities_of().mla:
            pytest.skip("backend does not declare mla")
        assert self._visible(backend_factory, writer, reader), f"pages not shared across {what}"
