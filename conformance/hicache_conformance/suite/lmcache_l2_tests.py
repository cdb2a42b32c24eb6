"""LMCache's multiprocess L2 adapter contract (``hicache check --engine lmcache-l2``).

``L2AdapterTests`` needs an ``l2_spec`` fixture: the ``--l2-adapter`` JSON object of the
adapter under test, with an isolated store (:func:`~..engines.lmcache_l2.adapter_spec`
makes one for a hicache-sdk backend, an ``L2AdapterInterface`` class or a built-in LMCache
type). Adapters are built through LMCache's own parser and factory, so a constructor error
LMCache would only log fails here. An optional ``freeze`` fixture (a context manager that
stalls the service) enables the frozen-service test; without one that test skips.

Rules checked (LMCache 0.5.6, ``lmcache/v1/distributed/l2_adapters/base.py``):

* three distinct event fds, each firing when a task of its kind completes; closed by
  ``close()``;
* lookups answer per key (a bitmap, never a prefix), and a task's result is returned once;
* stored chunks load back byte for byte into the caller's buffers; a buffer of another
  size is a 0 bit; a chunk of another dtype of the same size is a 0 bit;
* ``L2StoreResult`` bytes and usage count the chunks a store created, once;
* ``model_name``, ``kv_rank``, ``object_group_id`` and ``cache_salt`` each isolate;
* ``submit_unlock`` never raises; ``report_status`` has ``is_healthy``;
* chunks of 32 MiB round-trip;
* with the service stalled, every task completes (failed / 0 bits) within the deadline.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from ..engines import lmcache_l2 as E

__all__ = ["L2AdapterTests"]

N = 4096  # float16 elements: 8 KiB chunks
#: How long a task may take while the service is stalled (the adapter's own deadline).
STALLED_DEADLINE_S = 10.0


class L2AdapterTests:
    """Base class of the L2 adapter contract (see the module docs)."""

    @pytest.fixture
    def freeze(self) -> Callable[[], contextlib.AbstractContextManager[None]] | None:
        """A context manager factory that stalls the adapter's service, or ``None``."""
        return None

    @pytest.fixture
    def make_adapter(self, l2_spec: Mapping[str, Any]) -> Iterator[Callable[[], Any]]:
        reason = E.unavailable()
        if reason is not None:
            pytest.skip(reason)
        made: list[Any] = []

        def make() -> Any:
            a = E.build(l2_spec)
            made.append(a)
            return a

        yield make
        for a in made:
            with contextlib.suppress(Exception):
                a.close()

    @pytest.fixture
    def driver(self, make_adapter: Callable[[], Any]) -> E.Driver:
        return E.Driver(make_adapter(), 30.0)

    # -- event fds -----------------------------------------------------------------
    def test_three_distinct_event_fds_fire_and_close(self, make_adapter: Callable[[], Any]) -> None:
        a = make_adapter()
        fds = [a.get_store_event_fd(), a.get_lookup_and_lock_event_fd(), a.get_load_event_fd()]
        assert len(set(fds)) == 3, f"event fds are not distinct: {fds}"
        d = E.Driver(a, 30.0)
        key, obj = E.make_key("fd"), E.make_obj(N, seed=1)
        assert d.store([key], [obj]) is not None, "store task never signalled its fd"
        assert d.lookup([key]) is not None, "lookup task never signalled its fd"
        assert d.load([key], [E.make_obj(N, fill=0)]) is not None, "load task never signalled its fd"
        a.close()
        for fd in fds:
            with pytest.raises(OSError):
                os.fstat(fd)

    # -- lookup ----------------------------------------------------------------------
    def test_lookup_answers_per_key_not_as_a_prefix(self, driver: E.Driver) -> None:
        keys = [E.make_key(i) for i in range(4)]
        res = driver.store([keys[1], keys[3]], [E.make_obj(N, seed=1), E.make_obj(N, seed=3)])
        assert res is not None and res.is_successful()
        assert driver.lookup(keys) == [False, True, False, True]

    def test_results_are_returned_once(self, driver: E.Driver) -> None:
        a = driver.adapter
        key = E.make_key("once")
        assert driver.store([key], [E.make_obj(N, seed=1)]).is_successful()
        assert a.pop_completed_store_tasks() == {}
        tid = a.submit_lookup_and_lock_task([key], {})
        deadline = time.monotonic() + 30
        while (bm := a.query_lookup_and_lock_result(tid)) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert bm is not None and bm.test(0)
        assert a.query_lookup_and_lock_result(tid) is None, "a lookup result was returned twice"
        buf = E.make_obj(N, fill=0)  # the caller keeps its buffer until the task completes
        tid = a.submit_load_task([key], [buf])
        while (bm := a.query_load_result(tid)) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert bm is not None and bm.test(0)
        assert a.query_load_result(tid) is None, "a load result was returned twice"
        a.submit_unlock([key])

    # -- load ------------------------------------------------------------------------
    def test_round_trip_into_caller_buffers(self, driver: E.Driver) -> None:
        keys = [E.make_key(f"rt{i}") for i in range(3)]
        src = [E.make_obj(N, seed=i) for i in range(3)]
        assert driver.store(keys, src).is_successful()
        dst = [E.make_obj(N, fill=0) for _ in range(3)]
        assert driver.load(keys, dst) == [True, True, True]
        assert [E.obj_bytes(x) for x in dst] == [E.obj_bytes(x) for x in src]

    def test_wrong_size_loads_miss(self, driver: E.Driver) -> None:
        key = E.make_key("size")
        assert driver.store([key], [E.make_obj(N, seed=5)]).is_successful()
        assert driver.load([key], [E.make_obj(N + 64, fill=0)]) == [False], "a larger buffer loaded"
        assert driver.load([key], [E.make_obj(N - 64, fill=0)]) == [False], "a smaller buffer loaded"

    def test_another_dtype_of_the_same_size_misses(self, driver: E.Driver) -> None:
        import torch

        key = E.make_key("dtype")
        assert driver.store([key], [E.make_obj(N, dtype=torch.bfloat16, seed=6)]).is_successful()
        assert driver.load([key], [E.make_obj(N, dtype=torch.float16, fill=0)]) == [False], (
            "bf16 bytes loaded into an fp16 buffer of the same size"
        )

    # -- store -----------------------------------------------------------------------
    def test_store_bytes_and_usage_count_created_chunks_once(self, driver: E.Driver) -> None:
        a = driver.adapter
        keys = [E.make_key(f"acct{i}") for i in range(2)]
        objs = [E.make_obj(N, seed=i) for i in range(2)]
        before = a.get_usage().total_bytes_used
        first = driver.store(keys[:1], objs[:1])
        assert first.is_successful() and first.bytes_transferred() == N * 2
        again = driver.store(keys, objs)
        assert again.is_successful()
        assert again.bytes_transferred() == N * 2, "a chunk already stored was counted again"
        assert a.get_usage().total_bytes_used - before == 2 * N * 2

    # -- isolation -------------------------------------------------------------------
    @pytest.mark.parametrize("field", ["model", "rank", "group", "salt"])
    def test_each_key_field_isolates(self, driver: E.Driver, field: str) -> None:
        other = {"model": {"model": "conformance/other"}, "rank": {"rank": 1}, "group": {"group": 1},
                 "salt": {"salt": "tenant-b"}}[field]  # fmt: skip
        assert driver.store([E.make_key("iso")], [E.make_obj(N, seed=2)]).is_successful()
        assert driver.lookup([E.make_key("iso"), E.make_key("iso", **other)]) == [True, False], (
            f"a key differing only in {field} was found"
        )
        assert driver.load([E.make_key("iso", **other)], [E.make_obj(N, fill=0)]) == [False]

    # -- large chunks ----------------------------------------------------------------
    def test_32_mib_chunks_round_trip(self, driver: E.Driver) -> None:
        n = 16 << 20  # float16 elements: 32 MiB
        key, src = E.make_key("big"), E.make_obj(n, seed=9)
        res = driver.store([key], [src], timeout_s=120)
        assert res is not None and res.is_successful(), "a 32 MiB chunk was not stored"
        dst = E.make_obj(n, fill=0)
        assert driver.load([key], [dst], timeout_s=120) == [True]
        assert E.obj_bytes(dst) == E.obj_bytes(src)

    # -- misc ------------------------------------------------------------------------
    def test_unlock_never_raises_and_status(self, driver: E.Driver) -> None:
        a = driver.adapter
        a.submit_unlock([E.make_key("never-looked-up")])
        a.submit_unlock([])
        status = a.report_status()
        assert isinstance(status, dict) and isinstance(status.get("is_healthy"), bool)

    def test_every_task_completes_while_the_service_is_stalled(
        self, make_adapter: Callable[[], Any], freeze: Any
    ) -> None:
        if freeze is None:
            pytest.skip("no way to stall this adapter's service from the suite (no freeze fixture)")
        a = make_adapter()
        d = E.Driver(a, STALLED_DEADLINE_S)
        keys = [E.make_key(f"frozen{i}") for i in range(2)]
        assert d.store(keys[:1], [E.make_obj(N, seed=1)]).is_successful()
        with freeze():
            t0 = time.monotonic()
            store = d.store(keys[1:], [E.make_obj(N, seed=2)])
            lookup = d.lookup(keys)
            load = d.load(keys[:1], [E.make_obj(N, fill=0)])
            took = time.monotonic() - t0
        assert store is not None, f"a store task did not complete within {STALLED_DEADLINE_S:.0f} s"
        assert lookup is not None, f"a lookup task did not complete within {STALLED_DEADLINE_S:.0f} s"
        assert load is not None, f"a load task did not complete within {STALLED_DEADLINE_S:.0f} s"
        assert took < 3 * STALLED_DEADLINE_S
