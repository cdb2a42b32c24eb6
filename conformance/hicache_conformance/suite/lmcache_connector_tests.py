"""LMCache's in-process remote connector contract (``hicache check --engine lmcache-connector``).

``ConnectorTests`` needs a ``connector_config`` fixture: LMCache's engine configuration
that puts the connector under test behind LMCache's ``RemoteBackend``
(:func:`~..engines.lmcache_connector.connector_config`). Every connector is built by
LMCache's own loader (``RemoteBackend`` -> ``CreateConnector`` -> the
``remote_storage_plugins`` launcher -> the adapter's ``create_connector(ConnectorContext)``),
so an import or constructor error LMCache would only log fails here. An optional ``freeze``
fixture (a context manager that stalls the service) enables the frozen-service test.

Rules checked (LMCache 0.5.6, ``lmcache/v1/storage_backend/connector/base_connector.py``
and ``remote_backend.py``):

* a chunk put through LMCache's ``RemoteBackend`` comes back byte for byte, with the
  deployment's shapes, dtypes and memory format; ``contains`` answers prefixes and
  ``batched_get_blocking`` per key; LMCache's batched forms (``batched_submit_put_task``,
  ``batched_get_blocking``: the connector's ``batched_put`` / ``batched_get`` where it has
  them) do the same for a batch with a short chunk and misses in it;
* ``put`` never releases the caller's object (LMCache's wrapper does);
* ``get`` allocates through LMCache's allocator (the ``ConnectorContext``'s CPU backend),
  sized from the metadata, and releases what it allocated when it fails; every object the
  connector allocated is released or handed back (balanced reference counts);
* an object of another size, or of another layout of the same size, is a miss;
* model, world size, worker id, dtype and tags each isolate;
* short chunks (``save_unfull_chunk``) come back short; MLA: rank 0 writes, every rank reads;
* ``async`` methods never hold LMCache's event loop for their I/O (each step the
  coroutine takes on the loop is timed while the I/O is in flight); ``exists_sync`` answers
  while the loop is busy;
* nothing raises into LMCache's worker, with odd keys or a stalled service; ``close``
  returns;
* chunks of 32 MiB round-trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from ..engines import lmcache_connector as E

__all__ = ["ConnectorTests"]

#: At most this share of an async call's wall time may be spent holding the event loop.
LOOP_SHARE = 0.5
#: How long a call may take while the service is stalled (the connector's own deadline).
STALLED_DEADLINE_S = 15.0


def _bytes(obj: Any) -> bytes:
    return bytes(obj.byte_array)


class ConnectorTests:
    """Base class of the in-process connector contract (see the module docs)."""

    @pytest.fixture
    def freeze(self) -> Callable[[], contextlib.AbstractContextManager[None]] | None:
        """A context manager factory that stalls the connector's service, or ``None``."""
        return None

    @pytest.fixture
    def deploy(self, connector_config: Mapping[str, Any]) -> Iterator[Callable[..., E.Harness]]:
        """``deploy(**metadata)``: a ``Harness`` of one deployment over the shared store."""
        reason = E.unavailable()
        if reason is not None:
            pytest.skip(reason)
        made: list[E.Harness] = []

        def make(**meta: Any) -> E.Harness:
            h = E.Harness(connector_config, E.metadata(**meta))
            made.append(h)
            return h

        yield make
        for h in made:
            h.close(timeout=5)  # test_close_returns judges close

    @pytest.fixture
    def h(self, deploy: Callable[..., E.Harness]) -> E.Harness:
        return deploy()

    @pytest.fixture
    def tag(self, request: pytest.FixtureRequest) -> str:
        """A per-test prefix of chunk hashes (stores may be shared between tests)."""
        return f"{request.node.nodeid}@{time.time_ns()}"

    # -- building --------------------------------------------------------------------
    def test_built_by_lmcaches_loader(self, h: E.Harness) -> None:
        from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

        assert isinstance(h.connector, RemoteConnector), f"{type(h.connector)} is not a RemoteConnector"

    # -- put / get -------------------------------------------------------------------
    def test_round_trip_through_lmcaches_remote_backend(self, h: E.Harness, tag: str) -> None:
        keys = [h.key((tag, i)) for i in range(3)]
        src = [h.obj(i + 1) for i in range(3)]
        for k, o in zip(keys, src):
            h.put(k, o)
        assert all(h.contains(k) for k in keys), "a stored chunk is not found"
        got = [h.get_blocking(k) for k in keys]
        assert all(g is not None for g in got), "a stored chunk did not load"
        for g, o in zip(got, src):
            assert _bytes(g) == _bytes(o), "a chunk came back with other bytes"
            assert list(g.meta.shape) == list(o.meta.shape) and g.meta.dtype == o.meta.dtype
            assert g.meta.fmt == o.meta.fmt, f"memory format {g.meta.fmt}, stored {o.meta.fmt}"
        leaked = h.unreleased(got)
        for g in got:
            g.ref_count_down()
        assert not leaked, f"{len(leaked)} object(s) the connector allocated were never released"

    def test_put_never_releases_the_callers_object(self, h: E.Harness, tag: str) -> None:
        obj = h.obj(7)
        h.put(h.key(tag), obj)
        assert obj.get_ref_count() == 1, (
            f"put released the caller's object (ref count {obj.get_ref_count()}, was 1; "
            "LMCache's wrapper already releases the reference it was given)"
        )

    def test_lookups_answer_a_prefix_and_gets_per_key(self, h: E.Harness, tag: str) -> None:
        keys = [h.key((tag, i)) for i in range(4)]
        for i in (0, 2):
            h.put(keys[i], h.obj(i))
        assert h.batched_contains(keys) == 1, "batched_contains is not the leading run of hits"
        got = h.batched_get_blocking(keys)
        assert [g is not None for g in got] == [True, False, True, False]
        for g in got:
            if g is not None:
                g.ref_count_down()
        assert not h.unreleased()

    def test_batched_puts_and_gets_through_lmcaches_remote_backend(self, h: E.Harness, tag: str) -> None:
        # RemoteBackend's batched forms: the connector's batched_put / batched_get where it
        # supports them (else a call per key); a short chunk and misses inside one batch
        keys = [h.key((tag, "batch", i)) for i in range(5)]
        src = [h.obj(20 + i, num_tokens=16 if i == 3 else None) for i in range(4)]
        h.batched_put(keys[:4], src)
        for i, o in enumerate(src):
            assert o.get_ref_count() == 1, (
                f"batched put released the caller's object {i} (ref count {o.get_ref_count()}, was 1)"
            )
        h.batched_put(keys[:1], [h.obj(99)])  # create-if-absent: the first chunk stays
        order = [keys[4], keys[0], keys[3], h.key((tag, "batch", "absent")), keys[1], keys[2]]
        got = h.batched_get_blocking(order)
        try:
            assert [g is not None for g in got] == [False, True, True, False, True, True], (
                "batched_get_blocking did not answer each key"
            )
            for g, o in zip([got[1], got[2], got[4], got[5]], [src[0], src[3], src[1], src[2]]):
                assert g.get_size() == o.get_size() and _bytes(g) == _bytes(o), (
                    "a chunk came back from a batched get with other bytes or another size"
                )
            leaked = h.unreleased(got)
        finally:
            for g in got:
                if g is not None:
                    g.ref_count_down()
        assert not leaked, f"{len(leaked)} object(s) a batched get allocated were never released"

    def test_get_allocates_through_lmcaches_allocator_sized_from_metadata(
        self, h: E.Harness, tag: str
    ) -> None:
        key = h.key(tag)
        h.put(key, h.obj(3))
        before = len(h.allocated)
        got = h.run(h.wrapper.get(key))
        assert got is not None, "a stored chunk did not load"
        try:
            mine = [o for o in h.allocated[before:] if o is got]
            assert mine, "get returned memory that LMCache's allocator (the ConnectorContext's) did not give"
            assert list(got.meta.shape) == list(h.meta.get_shapes()[0]), (
                f"allocated {list(got.meta.shape)}, the metadata's chunk is {list(h.meta.get_shapes()[0])}"
            )
        finally:
            got.ref_count_down()

    def test_a_failed_get_releases_what_it_allocated(
        self, deploy: Callable[..., E.Harness], tag: str
    ) -> None:
        a = deploy(layers=2)
        b = deploy(layers=2, head_size=32)  # the same key, half the bytes per chunk
        c = deploy(layers=4, head_size=32)  # the same key and size, another layout
        key = a.key(tag)
        a.put(key, a.obj(5))
        for other in (b, c):
            got = other.run(other.wrapper.get(key))
            if got is not None:
                got.ref_count_down()
            assert not other.unreleased(), "a get that found no usable chunk kept what it allocated"

    # -- sizes and layouts -----------------------------------------------------------
    def test_an_object_of_another_size_is_a_miss(self, deploy: Callable[..., E.Harness], tag: str) -> None:
        a, b = deploy(layers=2), deploy(layers=2, head_size=32)
        key, src = a.key(tag), a.obj(5)
        a.put(key, src)
        got = b.run(b.wrapper.get(key))
        if got is not None:
            size = got.get_size()
            got.ref_count_down()
            raise AssertionError(
                f"a chunk of {src.get_size()} bytes was a hit for a deployment whose chunk is "
                f"{b.obj(0).get_size()} bytes (it loaded {size} bytes)"
            )

    def test_another_layout_of_the_same_size_is_a_miss(
        self, deploy: Callable[..., E.Harness], tag: str
    ) -> None:
        a, b = deploy(layers=2, head_size=64), deploy(layers=4, head_size=32)
        key = a.key(tag)
        a.put(key, a.obj(5))
        got = b.run(b.wrapper.get(key))
        if got is not None:
            shape = list(got.meta.shape)
            got.ref_count_down()
            raise AssertionError(
                f"a chunk of shape {list(a.meta.get_shapes()[0])} was a hit for a deployment of shape "
                f"{list(b.meta.get_shapes()[0])} (it loaded {shape})"
            )

    # -- isolation -------------------------------------------------------------------
    @pytest.mark.parametrize("field", ["model", "world_size", "worker_id", "dtype", "tag"])
    def test_each_key_field_isolates(self, h: E.Harness, tag: str, field: str) -> None:
        import torch

        other: dict[str, Any] = {
            "model": {"model_name": "conformance/other"},
            "world_size": {"world_size": 4},
            "worker_id": {"worker_id": 1},
            "dtype": {"dtype": torch.float16},
            "tag": {"request_configs": {"lmcache.tag.tenant": "b"}},
        }[field]
        base = {"request_configs": {"lmcache.tag.tenant": "a"}} if field == "tag" else {}
        h.put(h.key(tag, **base), h.obj(2))
        assert h.contains(h.key(tag, **base)), "a stored chunk is not found"
        assert not h.contains(h.key(tag, **other)), f"a key differing only in {field} was found"
        assert h.get_blocking(h.key(tag, **other)) is None, f"a key differing only in {field} loaded"

    # -- short chunks and MLA --------------------------------------------------------
    def test_short_chunks_come_back_short(self, h: E.Harness, tag: str) -> None:
        key, src = h.key(tag), h.obj(4, num_tokens=16)
        h.put(key, src)
        got = h.get_blocking(key)
        assert got is not None, "a short chunk did not load"
        try:
            assert got.get_size() == src.get_size(), (
                f"a short chunk of {src.get_size()} bytes came back with {got.get_size()}"
            )
            assert _bytes(got) == _bytes(src)
        finally:
            got.ref_count_down()

    def test_mla_rank_0_writes_and_every_rank_reads(self, deploy: Callable[..., E.Harness], tag: str) -> None:
        r0 = deploy(use_mla=True, world_size=2, worker_id=0)
        r1 = deploy(use_mla=True, world_size=2, worker_id=1)
        key0, key1 = r0.key(tag), r1.key(tag)
        src = r0.obj(6)
        r0.put(key0, src)
        got = r1.get_blocking(key1)
        assert got is not None, "rank 1 did not read the MLA chunk rank 0 wrote"
        try:
            assert _bytes(got) == _bytes(src)
        finally:
            got.ref_count_down()
        only1 = r1.key((tag, "rank1"))
        r1.put(only1, r1.obj(8))
        assert not r0.contains(r0.key((tag, "rank1"))), "rank 1 wrote an MLA chunk"

    # -- the event loop ----------------------------------------------------------------
    def test_async_calls_never_hold_the_event_loop(self, deploy: Callable[..., E.Harness], tag: str) -> None:
        h = deploy(layers=16, heads=8, head_size=128)  # 16 MiB bf16 chunks
        keys = [h.key((tag, i)) for i in range(4)]
        objs = [h.obj(i) for i in range(4)]
        lag: list[float] = []

        async def ticker(stop: asyncio.Event) -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                await asyncio.sleep(0.001)
                lag.append(time.perf_counter() - t0 - 0.001)

        async def calls() -> list[E.Timed]:
            stop = asyncio.Event()
            tick = asyncio.ensure_future(ticker(stop))
            timed = []
            for o in objs:
                o.ref_count_up()  # as LMCache's serializer does; its wrapper drops it
            puts = [E.Timed(h.wrapper.put(k, o)) for k, o in zip(keys, objs)]
            await asyncio.gather(*puts)
            gets = [E.Timed(h.wrapper.get(k)) for k in keys]
            got = await asyncio.gather(*gets)
            exists = [E.Timed(h.wrapper.exists(k)) for k in keys]
            found = await asyncio.gather(*exists)
            if h.wrapper.support_batched_put():  # the batched forms too, where it has them
                for o in objs:
                    o.ref_count_up()
                bput = E.Timed(h.wrapper.batched_put([h.key((tag, "b", i)) for i in range(4)], objs))
                await bput
                timed.append(bput)
            if h.wrapper.support_batched_get():
                bget = E.Timed(h.wrapper.batched_get(keys))
                got += await bget
                timed.append(bget)
            stop.set()
            await tick
            for g in got:
                if g is not None:
                    g.ref_count_down()
            assert all(g is not None for g in got) and all(found), "a stored chunk was not found"
            timed += puts + gets + exists
            return timed

        timed = h.run(calls(), timeout=120)
        held = sum(sum(t.steps) for t in timed)
        wall = sum(t.wall for t in timed)
        worst = max(max(t.steps) for t in timed)
        assert held <= LOOP_SHARE * wall or worst < 0.002, (
            f"the async calls ran on LMCache's event loop: they held it {held * 1e3:.1f} ms of their "
            f"{wall * 1e3:.1f} ms (longest step {worst * 1e3:.1f} ms; the loop's lag reached "
            f"{max(lag, default=0) * 1e3:.1f} ms)"
        )

    def test_exists_sync_answers_while_the_loop_is_busy(self, h: E.Harness, tag: str) -> None:
        key = h.key(tag)
        h.put(key, h.obj(1))
        busy, release = threading.Event(), threading.Event()

        async def occupy() -> None:
            busy.set()
            release.wait(30)  # holds LMCache's loop on purpose

        fut = asyncio.run_coroutine_threadsafe(occupy(), h.loop)
        busy.wait(10)
        answers: tuple[bool, bool] | None = None
        try:
            hit = E.bounded(h.wrapper.exists_sync, key, timeout=10)
            miss = E.bounded(h.wrapper.exists_sync, h.key((tag, "absent")), timeout=10)
            answers = (hit, miss)
        except E.Stuck:
            pass
        finally:
            release.set()
            fut.result(30)
        assert answers is not None, "exists_sync waited for LMCache's event loop (it is not synchronous)"
        assert answers == (True, False), f"exists_sync answered {answers} for a stored and an absent chunk"

    # -- faults ----------------------------------------------------------------------
    def test_odd_keys_round_trip_without_raising(self, h: E.Harness, tag: str) -> None:
        keys = [
            h.key(tag, model_name="org/model@v1 \\x", chunk_hash=-(1 << 63)),
            h.key(tag, request_configs={"lmcache.tag.user": "a/b@c%d"}),
        ]
        for i, k in enumerate(keys):
            src = h.obj(10 + i)
            h.put(k, src)
            assert h.run(h.wrapper.exists(k)), f"{k.to_string()!r} was not found"
            got = h.run(h.wrapper.get(k))
            assert got is not None and _bytes(got) == _bytes(src), f"{k.to_string()!r} did not round-trip"
            got.ref_count_down()

    def test_nothing_raises_while_the_service_is_stalled(self, h: E.Harness, tag: str, freeze: Any) -> None:
        if freeze is None:
            pytest.skip("no way to stall this connector's service from the suite (no freeze fixture)")
        stored = h.key((tag, 0))
        h.put(stored, h.obj(1))
        obj = h.obj(2)
        with freeze():
            t0 = time.monotonic()
            out: dict[str, Any] = {}
            for name, call in (
                ("exists", lambda: h.run(h.wrapper.exists(stored), STALLED_DEADLINE_S + 5)),
                ("exists_sync", lambda: E.bounded(h.wrapper.exists_sync, stored, timeout=STALLED_DEADLINE_S + 5)),
                ("get", lambda: h.run(h.wrapper.get(stored), STALLED_DEADLINE_S + 5)),
                ("put", lambda: (obj.ref_count_up(), h.run(h.wrapper.put(h.key((tag, 1)), obj), STALLED_DEADLINE_S + 5))),
            ):  # fmt: skip
                try:
                    out[name] = call()
                except Exception as e:
                    raise AssertionError(
                        f"{name} raised into LMCache's worker: {type(e).__name__}: {e}"
                    ) from e
            took = time.monotonic() - t0
        got = out["get"]
        if got is not None:
            got.ref_count_down()
        assert took < 4 * STALLED_DEADLINE_S, f"the calls took {took:.0f} s while the service was stalled"
        assert obj.get_ref_count() == 1

    def test_close_returns(self, deploy: Callable[..., E.Harness], tag: str) -> None:
        h = deploy()
        h.put(h.key(tag), h.obj(1))
        assert h.close(), "closing the connector (LMCache's RemoteBackend.close) did not return in 30 s"

    # -- large chunks ----------------------------------------------------------------
    def test_32_mib_chunks_round_trip(self, deploy: Callable[..., E.Harness], tag: str) -> None:
        h = deploy(layers=32, heads=8, head_size=128)  # 256 tokens x 32 layers: 32 MiB bf16
        key, src = h.key(tag), h.obj(9)
        assert src.get_size() == 32 << 20
        h.put(key, src, timeout=120)
        got = h.get_blocking(key)
        assert got is not None, "a 32 MiB chunk did not load"
        try:
            assert _bytes(got) == _bytes(src), "a 32 MiB chunk came back with other bytes"
        finally:
            got.ref_count_down()
