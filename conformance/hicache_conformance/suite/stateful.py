"""A hypothesis state machine comparing the backend with the ``memory`` reference
backend itself: a live ``MemoryStorage`` on a private, unbounded store, driven with the
same calls on the same pages. Modulo declared eviction: with ``eviction`` a page may
vanish from the backend, but a page that is there must hold the reference's bytes, and
the backend never holds a page the reference does not.

Under ``contract`` the machine sends only what SGLang sends (non-empty batches without
repeated keys, reads through SGLang's controller compared on the leading run of hits,
rewrites of the same bytes); under ``strict`` it adds empty and repeated batches,
per-key reads and rewrites with other bytes (the first write wins).

Each example gets a fresh namespace for the backend and a fresh private store for the
reference; both are closed and dropped when the example ends, so a run holds one
example's backends at a time. A failure is reported as the shortest sequence of calls
that failed, whatever hypothesis itself concluded about it.
"""

from __future__ import annotations

import uuid

from hicache_sdk.spec import HiCacheStorageConfig

from .. import pools as P
from ..base import Attached, BackendFactory, SuiteBase
from ..capabilities import level
from ..explain import describe_page, short_key
from ..matrix import PoolCase

_KEYS = 4


def _leading(pages: list[bytes | None]) -> int:
    n = 0
    while n < len(pages) and pages[n] is not None:
        n += 1
    return n


class StatefulTests(SuiteBase):
    @level(5)
    def test_matches_reference_model(self, backend_factory: BackendFactory) -> None:
        from hypothesis import HealthCheck, Phase, settings
        from hypothesis import strategies as st
        from hypothesis.errors import Flaky
        from hypothesis.stateful import (
            RuleBasedStateMachine,
            initialize,
            invariant,
            precondition,
            rule,
            run_state_machine_as_test,
        )

        from hicache_sdk.memory import MemoryStorage, drop_store

        suite = self
        eviction = self.capabilities_of().eviction
        strict = self.active_profile() == "strict"
        paths = self.io_paths()
        case = PoolCase()
        failures: list[tuple[list[str], BaseException]] = []
        seeds = st.sampled_from(["s0", "s1", "s2"])
        on_path = st.sampled_from(paths)  # every I/O path SGLang takes for the backend
        if strict:
            batches = st.lists(st.integers(0, _KEYS - 1), min_size=0, max_size=4)
        else:  # SGLang: 1..128 distinct chained page hashes per call
            batches = st.lists(st.integers(0, _KEYS - 1), min_size=1, max_size=4, unique=True)

        class Machine(RuleBasedStateMachine):
            att: Attached
            ref: Attached

            def __init__(self) -> None:
                super().__init__()
                self.log: list[str] = []
                self.store = ""
                self.written = False

            def _step(self, text: str) -> None:
                self.log.append(text)

            def _check(self, ok: bool, message: str) -> None:
                if not ok:
                    failures.append((list(self.log), AssertionError(message)))
                    raise AssertionError(message)

            @initialize()
            def setup(self) -> None:
                ns = self.ns = backend_factory.new_namespace()
                sc = suite.storage_config_for(case)
                self.att = suite.attach(backend_factory(namespace=ns, storage_config=sc), case)
                self.store = f"conformance-reference-{uuid.uuid4().hex[:12]}"
                ref_sc = HiCacheStorageConfig(
                    model_name=sc.model_name,
                    is_mla_model=sc.is_mla_model,
                    is_page_first_layout=sc.is_page_first_layout,
                    extra_config={"store": self.store},
                )
                self.ref = suite.attach(MemoryStorage(ref_sc, {}), case)
                self.keys = suite.keys(ns, "sm", _KEYS)
                self._step(f"a new backend and an empty reference (paths: {', '.join(paths)})")

            def teardown(self) -> None:
                if hasattr(self, "att"):
                    backend_factory.release(
                        self.att.backend, namespace=self.ns, clear=suite.capabilities_of().delete
                    )
                    del self.att
                if hasattr(self, "ref"):
                    self.ref.backend.close()
                    del self.ref
                if self.store:
                    drop_store(self.store)

            def _names(self, batch: list[int]) -> str:
                return "[" + ", ".join(f"k{i}" for i in batch) + "]"

            @rule(batch=batches, seed=seeds, path=on_path)
            def set_pages(self, batch: list[int], seed: str, path: str) -> None:
                keys = [self.keys[i] for i in batch]
                # contract: a rewrite stores the same bytes (SGLang relies only on it returning True)
                page_seeds = [f"{seed}{i}" if strict else f"page{i}" for i in batch]
                ok, _ = suite.write(self.att, keys, 0, seeds=page_seeds, path=path)
                ref_ok, _ = suite.write(self.ref, keys, 0, seeds=page_seeds)
                self.written = True
                self._step(f"write {self._names(batch)} on the {path} path (seed {seed!r}) -> {ok}")
                good = ok == ref_ok == [True] * len(keys) if strict else all(ok) and all(ref_ok)
                self._check(bool(good), f"writes returned {ok}, reference {ref_ok}")

            @precondition(lambda self: self.written)
            @rule(batch=batches, path=on_path)
            def get_pages(self, batch: list[int], path: str) -> None:
                keys = [self.keys[i] for i in batch]
                want = suite.read(self.ref, keys, 10)
                if strict:
                    got = suite.read(self.att, keys, 10, path=path)
                    self._step(
                        f"read {self._names(batch)} on the {path} path -> {['hit' if g else 'miss' for g in got]}"
                    )
                    for i, (g, w) in enumerate(zip(got, want)):
                        label = f"k{batch[i]} ({short_key(keys[i])})"
                        if g is None:
                            self._check(
                                eviction or w is None, f"{label}: a page the reference holds read as a miss"
                            )
                        else:
                            self._check(
                                g == w,
                                describe_page(label, w, g)
                                or f"{label}: a page the reference lacks read as a hit",
                            )
                    return
                run = _leading(want)
                for i in range(len(keys)):
                    P.zero_page(self.att.kv, 20 + i)
                ctl = suite.controller(self.att, path)
                n = ctl.prefetch(keys, 20)
                self._step(
                    f"SGLang prefetch {self._names(batch)} on the {path} path -> {n} committed (reference {run})"
                )
                # after a miss, fewer than the run is a strict rule (SGLang recomputes what a
                # batch answered all-or-nothing did not give; see assert_leading_run)
                exact = not eviction and (strict or run == len(keys))
                self._check(
                    n == run if exact else n <= run,
                    f"SGLang's prefetch committed {n} pages, the reference's leading run is {run}:\n{ctl.story()}",
                )
                for i in range(n):
                    got_i = P.page_bytes(self.att.kv, 20 + i)
                    line = describe_page(f"k{batch[i]} ({short_key(keys[i])})", want[i], got_i)
                    self._check(not line, line)

            @precondition(lambda self: self.written)
            @rule(batch=batches)
            def exists_pages(self, batch: list[int]) -> None:
                keys = [self.keys[i] for i in batch]
                n = self.att.backend.batch_exists(keys)
                ref = self.ref.backend.batch_exists(keys)
                self._step(f"batch_exists {self._names(batch)} -> {n} (reference {ref})")
                self._check(n <= ref if eviction else n == ref, f"batch_exists {n}, reference {ref}")

            @invariant()
            def never_more_than_reference(self) -> None:
                if hasattr(self, "keys") and hasattr(self, "att"):
                    extra = [
                        f"k{i}"
                        for i, k in enumerate(self.keys)
                        if self.att.backend.batch_exists([k]) and not self.ref.backend.batch_exists([k])
                    ]
                    self._check(not extra, f"the backend holds pages never written: {extra}")

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
        except (AssertionError, Flaky) as e:
            if not failures:
                raise
            steps, error = min(failures, key=lambda f: len(f[0]))
            lines = "\n".join(f"  {i + 1}. {s}" for i, s in enumerate(steps))
            note = ""
            if isinstance(e, Flaky):
                note = f"\n(hypothesis called it flaky: {type(e).__name__}; the calls above failed as shown)"
            raise AssertionError(
                f"the backend diverged from the memory reference after these calls:\n{lines}\n=> {error}{note}"
            ) from None
