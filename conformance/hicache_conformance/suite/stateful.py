"""A hypothesis state machine comparing the backend with the reference model of the
``memory`` backend (a dict with create-if-absent writes), modulo declared eviction:
with ``eviction`` a page may vanish, but a page that is there must hold its bytes."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from ..base import Attached, BackendFactory, SuiteBase
from ..capabilities import level
from ..matrix import PoolCase

_KEYS = 6
_SEEDS = st.sampled_from(["s0", "s1", "s2"])
_BATCH = st.lists(st.integers(0, _KEYS - 1), min_size=0, max_size=4)


class StatefulTests(SuiteBase):
    @level(5)
    def test_matches_reference_model(self, backend_factory: BackendFactory) -> None:
        suite = self
        eviction = self.capabilities_of().eviction
        case = PoolCase()

        class Machine(RuleBasedStateMachine):
            att: Attached

            @initialize()
            def setup(self) -> None:
                ns = backend_factory.new_namespace()
                self.att = suite.attach(
                    backend_factory(namespace=ns, storage_config=suite.storage_config_for(case)), case
                )
                self.keys = suite.keys(ns, "sm", _KEYS)
                self.model: dict[str, bytes] = {}

            @rule(batch=_BATCH, seed=_SEEDS)
            def set_pages(self, batch: list[int], seed: str) -> None:
                keys = [self.keys[i] for i in batch]
                ok, data = suite.write(self.att, keys, 0, seeds=[f"{seed}{i}" for i in batch])
                assert ok == [True] * len(keys)
                for k, d in zip(keys, data):
                    self.model.setdefault(k, d)

            @rule(batch=_BATCH)
            def get_pages(self, batch: list[int]) -> None:
                keys = [self.keys[i] for i in batch]
                for k, got in zip(keys, suite.read(self.att, keys, 10)):
                    if got is None:
                        assert eviction or k not in self.model, "a stored page read as a miss"
                    else:
                        assert got == self.model.get(k), "read bytes differ from the reference"

            @rule(batch=_BATCH)
            def exists_pages(self, batch: list[int]) -> None:
                keys = [self.keys[i] for i in batch]
                n = self.att.backend.batch_exists(keys)
                ref = next((i for i, k in enumerate(keys) if k not in self.model), len(keys))
                assert n <= ref if eviction else n == ref

            @invariant()
            def never_more_than_reference(self) -> None:
                if hasattr(self, "keys"):
                    extra = [k for k in self.keys if k not in self.model and self.att.backend.exists(k)]
                    assert not extra, "backend holds pages that were never written"

        run_state_machine_as_test(
            Machine,
            settings=settings(
                max_examples=self.stateful_examples,
                stateful_step_count=12,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
