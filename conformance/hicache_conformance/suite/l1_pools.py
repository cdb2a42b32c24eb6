"""L1 semantics across pools and identities: sidecar pools through v2, the
ALL_PAGES / TRAILING_PAGES endpoint vectors of SGLang 0.5.23 through the real
backend, and (default key scheme) isolation / sharing between deployments."""

from __future__ import annotations

from typing import Any

import pytest

from hicache_sdk.spec import PoolHitPolicy, PoolName, PoolTransfer

from .. import pools as P
from ..base import Attached, BackendFactory, SuiteBase
from ..capabilities import level, requires, strict_only
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


class PoolTests(SuiteBase):
    def _v2_put(self, att: Attached, name: str, keys: list[str], first_page: int) -> list[bytes]:
        data = [P.fill_page(att.pools[name], first_page + i, f"{name}:{k}") for i, k in enumerate(keys)]
        res = att.backend.batch_set_v2([_transfer(att, name, keys, first_page)])
        assert res == {name: [True] * len(keys)}, f"batch_set_v2 returned {res!r}"
        return data

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
        self.write(att, keys, 0)
        data = self._v2_put(att, sidecar, keys, 0)
        for i in range(3):
            P.zero_page(att.pools[sidecar], 10 + i)
        res = att.backend.batch_get_v2([_transfer(att, sidecar, keys, 10)])
        assert res == {sidecar: [True] * 3}
        assert [P.page_bytes(att.pools[sidecar], 10 + i) for i in range(3)] == data
        (missing,) = self.keys(backend_factory.namespace, "side-missing", 1)
        assert att.backend.batch_get_v2([_transfer(att, sidecar, [keys[0], missing], 20)]) == {
            sidecar: [True, False]
        }

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
        self.write(att, keys[:kv_n], 0)
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
        assert result.kv_hit_pages == hit, f"vector {self.VECTORS[vector]}: got {result!r}"
        if result.restorable_prefix_pages is not None:
            assert list(result.restorable_prefix_pages) == restorable

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
