"""Stateful property test of the read and write paths (hypothesis), over random request
streams with backend failures, delays and host-to-device copy failures, with and without
hybrid (sidecar) pools.

Two runners drive the same state machine:

* :class:`TestReadPath`: the virtual clock and the deterministic step scheduler (delays are
  jobs left pending while the clock moves);
* :class:`TestReadPathRealTime`: real time -- the worker thread, the monotonic clock and
  every backend call bounded by ``io_timeout_s`` on the resilience layer's deadline runner;
  injected stalls outlive the deadline, so calls are abandoned while they still run.

Invariants after every step: no device, host or sidecar slot leaks or is held twice
(quarantined slots included); lock references match the operations in flight (zero when
none); every device- and host-resident page, and every sidecar state, holds exactly the
bytes written for its prefix; each policy's scheduler-facing wait stays in bound.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from hiradix_helpers import Flaky, make_engine, make_storage, new_store
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from hicache_sdk.hiradix import Engine, MonotonicClock, ReadPathConfig, ThreadRunner, page_kv

PS = 4
SYSTEMS = [list(range(base, base + 24)) for base in (100, 300, 500, 700)]
HYBRIDS = [(), (), ("mamba",), ("swa", "indexer")]


class ReadPathMachine(RuleBasedStateMachine):
    REAL = False

    def __init__(self) -> None:
        super().__init__()
        self.e: Engine
        self.storage: Flaky
        self.pending: dict[str, int] = {}
        self.n = 0

    @initialize(
        policy=st.sampled_from(["best_effort", "wait_complete", "timeout"]),
        write=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
        lb=st.sampled_from([1, 10]),
        hybrid=st.sampled_from(HYBRIDS),
        stall_every=st.sampled_from([2, 3]),
    )
    def setup(self, policy: str, write: str, lb: int, hybrid: tuple[str, ...], stall_every: int) -> None:
        self.hybrid = hybrid
        real = {"io_timeout_s": 0.02, "prefetch_timeout_base": 0.05} if self.REAL else {}
        self.cfg = ReadPathConfig(
            page_size=PS,
            prefetch_threshold=8,
            load_back_threshold=lb,
            prefetch_policy=policy,
            write_policy=write,
            prefetch_retry_poll_interval=2,
            prefetch_retry_max_attempts=2,
            **real,  # type: ignore[arg-type]
        )
        self.store = new_store()
        self.storage = Flaky(make_storage(self.store))
        self.storage.stall_s = 0.2
        if self.REAL:  # every k-th read outlives io_timeout_s: abandoned while it still runs
            self.storage.stall_every = stall_every
        extra: dict[str, Any] = {"runner": ThreadRunner(), "clock": MonotonicClock()} if self.REAL else {}
        self.e = make_engine(
            self.cfg,
            storage=self.storage,
            host_tokens=128,
            dev_tokens=80,
            sidecars=hybrid,
            side_tokens=64,
            **extra,
        )

    def _tokens(self, sys_i: int, tail: int, length: int) -> list[int]:
        return SYSTEMS[sys_i] + [1000 + 37 * tail + j for j in range(length)]

    @rule(sys_i=st.integers(0, 3), tail=st.integers(0, 3), length=st.integers(0, 40), cold=st.booleans())
    def submit(self, sys_i: int, tail: int, length: int, cold: bool) -> None:
        if len(self.pending) >= 3:
            return
        if cold:
            self.evict_all()
        self.n += 1
        rid = f"r{self.n}"
        self.e.submit(rid, self._tokens(sys_i, tail, length))
        self.pending[rid] = len(self._tokens(sys_i, tail, length))

    @precondition(lambda self: bool(self.pending))
    @rule(pick=st.integers(0, 10), head=st.booleans())
    def poll(self, pick: int, head: bool) -> None:
        rid = sorted(self.pending)[pick % len(self.pending)]
        before = self.e.s.clock.now()
        r = self.e.try_admit(rid, queue_head=head)
        op = self.e.prefetcher.ongoing.get(rid)
        if r is None:
            assert self.cfg.prefetch_policy != "best_effort" or (not head and op is None)
            if self.cfg.prefetch_policy == "timeout" and op is not None and op.first_blocked_at is not None:
                landed = op.host_indices is not None and op.completed_tokens >= (op.hit_tokens or 0)
                assert landed or before - op.first_blocked_at < self.cfg.timeout_for(op.requested_tokens)
            return
        del self.pending[rid]
        assert self.e.verify(r.nodes)
        assert r.gpu_hit + r.computed <= r.tokens

    @precondition(lambda self: bool(self.pending))
    @rule(pick=st.integers(0, 10))
    def cancel(self, pick: int) -> None:
        rid = sorted(self.pending)[pick % len(self.pending)]
        self.e.cancel(rid)
        del self.pending[rid]

    @rule(n=st.integers(1, 3))
    def step(self, n: int) -> None:
        if self.REAL:
            time.sleep(0.004 * n)
        else:
            for _ in range(n):
                self.e.s.runner.step()  # type: ignore[attr-defined]
        self.e.writer.drain()

    @rule(dt=st.sampled_from([0.05, 0.5, 2.0]))
    def advance(self, dt: float) -> None:
        if self.REAL:
            time.sleep(dt / 40)
        else:
            self.e.s.clock.advance(dt)  # type: ignore[attr-defined]

    @rule(kind=st.sampled_from(["exists", "get", "short", "set", "copy", "side", "stall", "stall_get"]))
    def inject(self, kind: str) -> None:
        if kind == "copy":
            self.e.s.dev.fail_copies += 1
        elif kind.startswith("stall"):
            if self.REAL:
                attr = "stall_get_calls" if kind == "stall_get" else "stall_calls"
                setattr(self.storage, attr, getattr(self.storage, attr) + 2)
        else:
            attr = {
                "exists": "fail_exists",
                "get": "fail_get",
                "short": "short_get",
                "set": "fail_set",
                "side": "fail_side_get",
            }[kind]
            setattr(self.storage, attr, getattr(self.storage, attr) + 1)

    @rule()
    def evict_all(self) -> None:
        """Device and host give up every unlocked page (a cold cache): later requests go to L3
        (in real time, once the backups in flight are acknowledged, bounded by 1 s)."""
        if self.REAL:
            self.e.flush(1.0)
        self.e.s.evict_device(self.e.s.dev.size)
        self.e.s.evict_host(self.e.s.host.size)

    @rule(sys_i=st.integers(0, 3), tail=st.integers(0, 3), length=st.integers(0, 40))
    def peer_writes(self, sys_i: int, tail: int, length: int) -> None:
        """Another engine serves a prefix and writes it to the shared store (a cold peer)."""
        cfg = ReadPathConfig(page_size=PS, prefetch_threshold=8, load_back_threshold=1)
        peer = make_engine(
            cfg, self.store, host_tokens=128, dev_tokens=80, sidecars=self.hybrid, side_tokens=64
        )
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
        with s.host_lock:  # quarantine releases happen on worker threads under this lock
            nodes = s.tree.walk()
            dev_pages = [int(n.value[0]) // PS for n in nodes if n.value is not None]
            assert len(dev_pages) == len(set(dev_pages)) == s.dev.used_pages()
            held: dict[int, list[int]] = {id(s.host): []}
            for sc in s.sidecars:
                held.setdefault(id(sc.pool), [])
            for n in nodes:
                if n.host_value is not None:
                    held[id(s.host)].append(int(n.host_value[0]))
                for sc in s.sidecars:
                    if sc.name in n.side:
                        held[id(sc.pool)].append(int(n.side[sc.name][0]))
            for op in self.e.prefetcher.ongoing.values():
                if op.host_indices is not None:
                    held[id(s.host)] += [int(i) for i in op.host_indices[::PS]]
                for sr in op.side:
                    if sr.slots is not None:
                        held[id(sr.sc.pool)] += [int(i) for i in sr.slots[:: sr.sc.slots_per_page]]
            for op in self.e.prefetcher.quarantine_ops:
                for pool, idx in op.quarantined:
                    held[id(pool)] += [int(i) for i in idx[:: pool.page_size]]
            pools = [s.host, *(sc.pool for sc in s.sidecars if sc.trailing)]
            for pool in pools:
                starts = held[id(pool)]
                assert len(starts) == len(set(starts)), "a slot is held twice"
                assert pool.size - pool.available_size() == len(starts) * pool.page_size, "slot leak"

    @invariant()
    def locks_match_operations(self) -> None:
        s = self.e.s
        expect: dict[int, int] = {}
        for op in self.e.prefetcher.ongoing.values():
            for n in op.anchor.path():
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
        assert self.e.verify_sidecars()

    def teardown(self) -> None:
        if not hasattr(self, "e"):
            return
        s = self.e.s
        st_ = self.storage
        for attr in ("fail_exists", "fail_get", "fail_set", "short_get", "fail_side_get", "stall_calls"):
            setattr(st_, attr, 0)
        st_.stall_get_calls = st_.stall_every = 0
        s.dev.fail_copies = 0
        try:
            for _ in range(400):
                if not self.pending:
                    break
                for rid in sorted(self.pending):
                    if self.e.try_admit(rid) is not None:
                        del self.pending[rid]
                if self.REAL:
                    time.sleep(0.01)
                else:
                    s.runner.run_all()  # type: ignore[attr-defined]
                    s.clock.advance(1.0)  # type: ignore[attr-defined]
            assert not self.pending
        finally:
            s.close()  # joins the worker and drains abandoned calls: every read has ended
        self.e.prefetcher.drain()
        self.e.writer.drain()
        assert not self.e.prefetcher.ongoing and self.e.prefetcher.tokens_occupied == 0
        assert not self.e.prefetcher.quarantine_ops
        assert not self.e.writer.ongoing
        assert all(n.lock_ref == 0 and n.host_lock_ref == 0 for n in s.tree.walk())
        self.slots_accounted()


class RealTimeMachine(ReadPathMachine):
    REAL = True


TestReadPath = ReadPathMachine.TestCase
TestReadPathRealTime = RealTimeMachine.TestCase
TestReadPathRealTime.settings = settings(
    TestReadPathRealTime.settings, max_examples=10, stateful_step_count=20, deadline=None
)
