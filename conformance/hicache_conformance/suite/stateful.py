"""A hypothesis state machine comparing the backend with the ``memory`` reference
backend itself: a live ``MemoryStorage`` on a private, unbounded store, driven with the
same calls on the same pages. Modulo declared eviction: with ``eviction`` a page may
vanish from the backend, but a page that is there must hold the reference's bytes, and
the backend never holds a page the reference does not.

Each example gets a fresh namespace for the backend and a fresh private store for the
reference; the store is dropped when the example ends.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from hicache_sdk.spec import HiCacheStorageConfig

from ..base import Attached, BackendFactory, SuiteBase
from ..capabilities import level
from ..matrix import PoolCase

_KEYS = 6
_SEEDS = st.sampled_from(["s0", "s1", "s2"])
_BATCH = st.lists(st.integers(0, _KEYS - 1), min_size=0, max_size=4)


class StatefulTests(SuiteBase):
    @level(5)
    def test_matches_reference_model(self, backend_factory: BackendFactory) -> None:
        from hicache_sdk.memory import MemoryStorage, drop_store

        suite = self
        eviction = self.capabilities_of().eviction
        case = PoolCase()
        stores: list[str] = []

        class Machine(RuleBasedStateMachine):
            att: Attached
            ref: Attached

            @initialize()
            def setup(self) -> None:
                ns = backend_factory.new_namespace()
                sc = suite.storage_config_for(case)
                self.att = suite.attach(backend_factory(namespace=ns, storage_config=sc), case)
                store = f"conformance-reference-{uuid.uuid4().hex[:12]}"
                stores.append(store)
                ref_sc = HiCacheStorageConfig(
                    model_name=sc.model_name,
                    is_mla_model=sc.is_mla_model,
                    is_page_first_layout=sc.is_page_first_layout,
                    extra_config={"store": store},
                )
                self.ref = suite.attach(MemoryStorage(ref_sc, {}), case)
                self.keys = suite.keys(ns, "sm", _KEYS)

            def teardown(self) -> None:
                if hasattr(self, "ref"):
                    self.ref.backend.close()

            def _ref_read(self, keys: list[str]) -> list[bytes | None]:
                # The reference is read the same way (v1 or legacy) as the backend.
                return suite.read(self.ref, keys, 10)

            @rule(batch=_BATCH, seed=_SEEDS)
            def set_pages(self, batch: list[int], seed: str) -> None:
                keys = [self.keys[i] for i in batch]
                seeds = [f"{seed}{i}" for i in batch]
                ok, _ = suite.write(self.att, keys, 0, seeds=seeds)
                ref_ok, _ = suite.write(self.ref, keys, 0, seeds=seeds)
                assert ok == ref_ok == [True] * len(keys), f"writes returned {ok}, reference {ref_ok}"

            @rule(batch=_BATCH)
            def get_pages(self, batch: list[int]) -> None:
                keys = [self.keys[i] for i in batch]
                want = self._ref_read(keys)
                got = suite.read(self.att, keys, 10)
                for g, w in zip(got, want):
                    if g is None:
                        assert eviction or w is None, "a page the reference holds read as a miss"
                    else:
                        assert g == w, "read bytes differ from the reference's"

            @rule(batch=_BATCH)
            def exists_pages(self, batch: list[int]) -> None:
                keys = [self.keys[i] for i in batch]
                n = self.att.backend.batch_exists(keys)
                ref = self.ref.backend.batch_exists(keys)
                assert n <= ref if eviction else n == ref, f"batch_exists {n}, reference {ref}"

            @rule(i=st.integers(0, _KEYS - 1))
            def exists_one(self, i: int) -> None:
                got = self.att.backend.exists(self.keys[i])
                ref = self.ref.backend.exists(self.keys[i])
                assert got == ref or (eviction and not got), f"exists {got}, reference {ref}"

            @invariant()
            def never_more_than_reference(self) -> None:
                if hasattr(self, "keys"):
                    extra = [
                        k for k in self.keys if self.att.backend.exists(k) and not self.ref.backend.exists(k)
                    ]
                    assert not extra, "backend holds pages the reference does not (never written)"

        try:
            run_state_machine_as_test(
                Machine,
                settings=settings(
                    max_examples=self.stateful_examples,
                    stateful_step_count=12,
                    deadline=None,
                    # a certification run is deterministic: the same examples every run
                    derandomize=True,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                    phases=[p for p in Phase if self.stateful_shrink or p is not Phase.shrink],
                ),
            )
        finally:
            for store in stores:
                drop_store(store)
