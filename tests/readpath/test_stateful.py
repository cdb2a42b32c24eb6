"""Stateful property test of the read and write paths (hypothesis), on a virtual clock and
the deterministic step scheduler, over random request streams with backend failures,
delays (jobs left pending while the clock moves) and host-to-device copy failures.

Invariants after every step: no device or host slot leaks or is held twice; lock references
match the operations in flight (zero when none); every device- and host-resident page holds
exactly the bytes written for its prefix; each policy's scheduler-facing wait stays in bound.
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from readpath_helpers import Flaky, make_engine, make_storage, new_store

from hicache_sdk.readpath import Engine, ReadPathConfig, page_kv

PS = 4
SYSTEMS = [list(range(base, base + 24)) for base in (100, 300, 500, 700)]


class ReadPathMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.e: Engine
        self.storage: Flaky
        self.pending: dict[str, int] = {}
        self.first_blocked: dict[str, float] = {}
        self.n = 0

    @initialize(
        policy=st.sampled_from(["best_effort", "wait_complete", "timeout"]),
        write=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
        lb=st.sampled_from([1, 10]),
    )
    def setup(self, policy: str, write: str, lb: int) -> None:
        self.cfg = ReadPathConfig(
            page_size=PS,
            prefetch_threshold=8,
            load_back_threshold=lb,
            prefetch_policy=policy,
            write_policy=write,
        )
        self.store = new_store()
        self.storage = Flaky(make_storage(self.store))
        self.e = make_engine(self.cfg, storage=self.storage, host_tokens=128, dev_tokens=80)

    def _tokens(self, sys_i: int, tail: int, length: int) -> list[int]:
        return SYSTEMS[sys_i] + [1000 + 37 * tail + j for j in range(length)]

    @rule(sys_i=st.integers(0, 3), tail=st.integers(0, 3), length=st.integers(0, 40))
    def submit(self, sys_i: int, tail: int, length: int) -> None:
        if len(self.pending) >= 3:
            return
        self.n += 1
        rid = f"r{self.n}"
        self.e.submit(rid, self._tokens(sys_i, tail, length))
        self.pending[rid] = len(self._tokens(sys_i, tail, length))

    @precondition(lambda self: bool(self.pending))
    @rule(pick=st.integers(0, 10))
    def poll(self, pick: int) -> None:
        rid = sorted(self.pending)[pick % len(self.pending)]
        now = self.e.s.clock.now()  # type: ignore[attr-defined]
        r = self.e.try_admit(rid)
        op = self.e.prefetcher.ongoing.get(rid)
        if r is None:
            assert self.cfg.prefetch_policy != "best_effort"
            self.first_blocked.setdefault(rid, now)
            if self.cfg.prefetch_policy == "timeout" and op is not None:
                landed = op.host_indices is not None and op.completed_tokens >= (op.hit_tokens or 0)
                assert landed or now - self.first_blocked[rid] < self.cfg.timeout_for(op.requested_tokens)
            return
        del self.pending[rid]
        assert self.e.verify(r.nodes)
        assert r.gpu_hit + r.computed <= r.tokens
        if self.cfg.prefetch_policy == "best_effort":
            assert r.blocked_polls == 0

    @precondition(lambda self: bool(self.pending))
    @rule(pick=st.integers(0, 10))
    def cancel(self, pick: int) -> None:
        rid = sorted(self.pending)[pick % len(self.pending)]
        self.e.cancel(rid)
        del self.pending[rid]

    @rule(n=st.integers(1, 3))
    def step(self, n: int) -> None:
        for _ in range(n):
            self.e.s.runner.step()  # type: ignore[attr-defined]
        self.e.writer.drain()

    @rule(dt=st.sampled_from([0.05, 0.5, 2.0]))
    def advance(self, dt: float) -> None:
        self.e.s.clock.advance(dt)  # type: ignore[attr-defined]

    @rule(kind=st.sampled_from(["exists", "get", "short", "set", "copy"]))
    def inject(self, kind: str) -> None:
        if kind == "copy":
            self.e.s.dev.fail_copies += 1
        else:
            attr = {"exists": "fail_exists", "get": "fail_get", "short": "short_get", "set": "fail_set"}[kind]
            setattr(self.storage, attr, getattr(self.storage, attr) + 1)

    @rule(sys_i=st.integers(0, 3), tail=st.integers(0, 3), length=st.integers(0, 40))
    def peer_writes(self, sys_i: int, tail: int, length: int) -> None:
        """Another engine serves a prefix and writes it to the shared store (a cold peer)."""
        peer = make_engine(self.cfg, self.store, host_tokens=128, dev_tokens=80)
        peer.submit("p", self._tokens(sys_i, tail, length))
        for _ in range(20):
            if peer.try_admit("p") is not None:
                break
            peer.s.runner.run_all()  # type: ignore[attr-defined]
            peer.s.clock.advance(5.0)  # type: ignore[attr-defined]
        peer.s.runner.run_all()  # type: ignore[attr-defined]
        peer.writer.drain()

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def slots_accounted(self) -> None:
        s = self.e.s
        nodes = s.tree.walk()
        dev_pages = [int(n.value[0]) // PS for n in nodes if n.value is not None]
        assert len(dev_pages) == len(set(dev_pages)) == s.dev.used_pages()
        host: list[int] = [int(n.host_value[0]) // PS for n in nodes if n.host_value is not None]
        for op in self.e.prefetcher.ongoing.values():
            if op.host_indices is not None:
                host += [int(i) // PS for i in op.host_indices[::PS]]
        quarantined = self._quarantined()
        host += quarantined
        assert len(host) == len(set(host))
        assert s.host.size - s.host.available_size() == len(host) * PS

    def _quarantined(self) -> list[int]:
        out: list[int] = []
        for op in self._all_ops():
            if op.quarantined is not None:
                out += [int(i) // PS for i in op.quarantined[::PS]]
        return out

    def _all_ops(self) -> list[Any]:
        ops: list[Any] = []
        for job in list(self.e.s.runner.pending):  # type: ignore[attr-defined]
            cell = getattr(job, "__closure__", None) or ()
            for c in cell:
                v = c.cell_contents
                if type(v).__name__ == "PrefetchOp":
                    ops.append(v)
            for d in getattr(job, "__defaults__", None) or ():
                if type(d).__name__ == "PrefetchOp":
                    ops.append(d)
        return ops

    @invariant()
    def locks_match_operations(self) -> None:
        s = self.e.s
        expect: dict[int, int] = {}
        anchors = [op.anchor for op in self.e.prefetcher.ongoing.values()]
        for a in anchors:
            for n in a.path():
                expect[n.id] = expect.get(n.id, 0) + 1
        for n in s.tree.walk():
            assert n.lock_ref == 0
            assert n.host_lock_ref >= expect.get(n.id, 0)
        if not self.e.writer.ongoing:
            assert all(n.host_lock_ref == expect.get(n.id, 0) for n in s.tree.walk())

    @invariant()
    def resident_bytes_are_what_was_written(self) -> None:
        s = self.e.s
        shape = (2, PS, *s.dev.kv.shape[2:])
        for n in s.tree.walk():
            assert n.hash is not None
            want = page_kv(n.hash, shape, s.dev.dtype)
            if n.value is not None:
                assert torch.equal(s.dev.kv.index_select(1, n.value), want)
            if n.host_value is not None:
                assert torch.equal(s.host_kv.index_select(1, n.host_value), want)

    def teardown(self) -> None:
        if not hasattr(self, "e"):
            return
        s = self.e.s
        self.storage.fail_exists = self.storage.fail_get = self.storage.fail_set = self.storage.short_get = 0
        s.dev.fail_copies = 0
        for _ in range(200):
            if not self.pending:
                break
            for rid in sorted(self.pending):
                if self.e.try_admit(rid) is not None:
                    del self.pending[rid]
            s.runner.run_all()  # type: ignore[attr-defined]
            s.clock.advance(1.0)  # type: ignore[attr-defined]
        assert not self.pending
        s.runner.run_all()  # type: ignore[attr-defined]
        self.e.writer.drain()
        assert not self.e.prefetcher.ongoing and self.e.prefetcher.tokens_occupied == 0
        assert all(n.lock_ref == 0 and n.host_lock_ref == 0 for n in s.tree.walk())
        self.slots_accounted()


ReadPathMachine.TestCase.settings = ReadPathMachine.TestCase.settings  # profile-controlled
TestReadPath = ReadPathMachine.TestCase
