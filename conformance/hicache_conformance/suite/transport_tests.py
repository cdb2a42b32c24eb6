"""Transport-level tests: certify a :class:`~hicache_sdk.Transport` directly, below the
paged adapter, with raw plants that no adapter-level test can make.

``TransportTests`` (a mixin like the others, part of ``BackendSuite``) needs a ``transport``
fixture: by default the ``raw_transport`` of a backend built on ``PagedStorage`` (so
``hicache check NAME`` and a ``BackendSuite`` subclass run these for every such backend,
and skip them, with the reason, for a backend written straight against the ABC); an author
of a bare transport overrides the fixture::

    class TestMyTransport(TransportTests):
        backend = "mine"            # for the report and the capability gate

        @pytest.fixture
        def transport(self, hicache_namespace):
            t = MyTransport(...)
            yield t
            t.close()

Keys are prefixed with the test namespace (transport keys already carry the namespace:
the key scheme puts it there) and every key written is deleted at teardown.

Rules (see ``docs/conformance.md``): byte-exact round trips, multi-segment buffers,
a miss is ``False`` / ``None`` (never an exception), an object shorter or longer than the
buffer is never read as ``True``, a foreign object (bytes no adapter wrote) reads back
exactly, a write of an existing object leaves it untouched (create-if-absent), duplicate
keys in one batch all report ``True`` and the object is the first copy, whole (the first
write wins), and no reader ever sees a partially written object. Ranged reads:
:mod:`.range_tests`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from hicache_sdk import SIZE_UNKNOWN, TransportError

from .. import pools as P
from ..base import BackendFactory, SuiteBase
from ..capabilities import level, requires
from ..explain import describe_page
from .range_tests import RangeReadTests

__all__ = ["TransportTests", "no_transport_reason"]

_N = 4096  # bytes of a small object


def _has_transport(cls: type[Any]) -> bool:
    from hicache_sdk import PagedStorage

    return isinstance(cls, type) and issubclass(cls, PagedStorage)


def no_transport_reason(cls: type[Any]) -> str:
    """Why the transport tests skip a backend: it has no transport to certify."""
    return (
        f"no transport: {cls.__name__} is written straight against the HiCacheStorage ABC, "
        "not built on PagedStorage (a bare Transport is certified by a TransportTests class "
        "with a transport fixture)"
    )


def _buf(nbytes: int) -> torch.Tensor:
    return torch.zeros(nbytes, dtype=torch.uint8)


def _filled(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()


def _segs(t: torch.Tensor, parts: int = 1) -> list[tuple[int, int]]:
    """``t`` as ``parts`` consecutive segments (the last one takes the remainder)."""
    n = t.numel()
    size = n // parts
    out = [(t.data_ptr() + i * size, size) for i in range(parts - 1)]
    out.append((t.data_ptr() + (parts - 1) * size, n - (parts - 1) * size))
    return out


class TransportTests(RangeReadTests, SuiteBase):
    """See the module docs."""

    @pytest.fixture
    def transport(self, backend_factory: BackendFactory) -> Any:
        if not self.transport_tests:
            pytest.skip(
                f"transport_tests = False: {type(self).__name__} changes only what sits above "
                "the transport, whose tests its base class runs"
            )
        cls = self.backend_class()
        if not _has_transport(cls):
            pytest.skip(no_transport_reason(cls))
        backend = backend_factory()
        t = getattr(backend, "raw_transport", None)
        if t is None:
            pytest.skip(no_transport_reason(type(backend)))
        return t

    @pytest.fixture
    def tkeys(self, transport: Any, hicache_namespace: str) -> Iterator[Any]:
        made: list[str] = []

        def make(label: str, n: int = 1) -> list[str]:
            ks = [f"{hicache_namespace}-tt-{label}-{i}" for i in range(n)]
            made.extend(ks)
            return ks

        yield make
        try:
            transport.delete(made)
        except Exception:
            pass

    # -- helpers -----------------------------------------------------------------------
    @staticmethod
    def _put(t: Any, key: str, data: bytes, parts: int = 1) -> bool:
        src = _filled(data)
        (ok,) = t.write([key], [_segs(src, parts)])
        return bool(ok)

    @staticmethod
    def _get(t: Any, key: str, nbytes: int, parts: int = 1) -> bytes | None:
        dst = torch.full((nbytes,), 0x5A, dtype=torch.uint8)  # the sentinel shows a short read
        (ok,) = t.read([key], [_segs(dst, parts)])
        return bytes(dst.numpy()) if ok else None

    def _read_back(self, t: Any, key: str, data: bytes, what: str, parts: int = 1) -> None:
        """Fail, naming the read, unless ``key`` reads back as ``data``."""
        got = self._get(t, key, len(data), parts)
        line = describe_page(f"read of {what}", data, got)
        assert not line, line

    # -- tests -------------------------------------------------------------------------
    @level(1)
    def test_transport_round_trip_is_byte_exact(self, transport: Any, tkeys: Any) -> None:
        keys = tkeys("rt", 3)
        data = [P.pattern(k, _N) for k in keys]
        srcs = [_filled(d) for d in data]  # kept alive: segments are bare addresses
        assert transport.write(keys, [_segs(t) for t in srcs]) == [True] * 3
        sizes = transport.exists(keys)
        assert all(s in (_N, SIZE_UNKNOWN) for s in sizes), f"exists sizes {sizes}, want {_N}"
        for k, d in zip(keys, data):
            self._read_back(transport, k, d, "an object into 3 segments", parts=3)
        (k2,) = tkeys("rt-seg")
        assert self._put(transport, k2, data[0], parts=5), "a write from 5 segments reported False"
        self._read_back(transport, k2, data[0], "an object written from 5 segments")
        assert transport.exists([]) == [] and transport.read([], []) == [] and transport.write([], []) == []

    @level(1)
    def test_transport_miss_is_false_not_an_error(self, transport: Any, tkeys: Any) -> None:
        (k,) = tkeys("miss")
        try:
            got = transport.read([k, k], [_segs(_buf(_N)), _segs(_buf(_N))])
            sizes = transport.exists([k])
        except Exception as e:
            pytest.fail(f"a missing object raised {type(e).__name__}: {e} (a miss must be False / None)")
        assert got == [False, False] and sizes == [None]

    @level(1)
    @pytest.mark.parametrize("stored", ["truncated", "oversized"])
    def test_transport_wrong_size_object_is_never_read(self, transport: Any, tkeys: Any, stored: str) -> None:
        """An object shorter (a torn or foreign write) or longer than the buffer is a miss:
        under a raw key scheme nothing above the transport checks the size, so a ``True``
        here makes ``batch_get_v1`` serve a half-filled page as a hit. A ``TransportError``
        for the one-object batch counts as a miss too (the adapter reads it as one)."""
        (k,) = tkeys(stored)
        size = _N // 2 if stored == "truncated" else _N * 2
        assert self._put(transport, k, P.pattern(k, size))

        def get(parts: int) -> bytes | None:
            try:
                return self._get(transport, k, _N, parts=parts)
            except TransportError:  # the whole (one-object) batch failed: the adapter's miss
                return None

        assert get(1) is None, f"a {stored} object ({size} bytes) read as {_N} bytes"
        assert get(2) is None, f"a {stored} object read into 2 segments"

    @level(1)
    def test_transport_foreign_object_reads_back_exactly(self, transport: Any, tkeys: Any) -> None:
        (k,) = tkeys("foreign")
        data = bytes(range(256)) * (_N // 256)
        assert self._put(transport, k, data)
        self._read_back(transport, k, data, "a foreign object")

    @level(1)
    def test_transport_write_never_replaces_an_object(self, transport: Any, tkeys: Any) -> None:
        (k,) = tkeys("keep")
        first, second = P.pattern("first", _N), P.pattern("second", _N)
        assert self._put(transport, k, first)
        self._read_back(transport, k, first, "a new object (before any second write)")
        assert self._put(transport, k, second), "a write of an existing object must report True"
        got = self._get(transport, k, _N)
        assert got != second, "a write replaced an existing object (the second write's bytes are there)"
        line = describe_page("read after a second write of the same key", first, got)
        assert not line, line

    @level(1)
    def test_transport_duplicate_keys_in_one_batch(self, transport: Any, tkeys: Any) -> None:
        """Every occurrence reports True; the object is the FIRST copy, whole (the
        contract: a later copy never replaces it). Three copies, so a writer that keeps
        the last or a middle one fails."""
        (k,) = tkeys("dup")
        copies = [P.pattern(f"copy-{c}", _N) for c in "abc"]
        srcs = [_filled(c) for c in copies]  # kept alive: segments are bare addresses
        ok = transport.write([k, k, k], [_segs(t) for t in srcs])
        assert list(ok) == [True, True, True], f"duplicate keys reported {ok}"
        got = self._get(transport, k, _N)
        assert got in copies, "the object is not one of the copies, whole: " + describe_page(
            "read of the duplicated key vs the first copy", copies[0], got
        )
        assert got == copies[0], f"copy {'abc'[copies.index(got)]} won; the first write must win"
        dsts = [_buf(_N), _buf(_N)]
        assert transport.read([k, k], [_segs(d) for d in dsts]) == [True, True]
        assert bytes(dsts[0].numpy()) == bytes(dsts[1].numpy()) == got

    @level(1)
    def test_transport_delete_makes_a_miss(self, transport: Any, tkeys: Any) -> None:
        k, other = tkeys("del", 2)
        assert self._put(transport, k, P.pattern(k, _N)) and self._put(transport, other, P.pattern(other, _N))
        self._read_back(transport, other, P.pattern(other, _N), "another object, before any delete")
        transport.delete([k, k, f"{k}-never-written"])
        assert transport.exists([k]) == [None], f"exists after delete reports {transport.exists([k])}"
        assert self._get(transport, k, _N) is None, "a deleted object still reads as a hit"
        got = self._get(transport, other, _N)
        assert got is not None, "delete removed another object"
        line = describe_page("read of another object after a delete", P.pattern(other, _N), got)
        assert not line, line

    @level(1)
    @requires("health")
    def test_transport_health_probe_answers(self, transport: Any) -> None:
        """The liveness probe the circuit breaker's half-open state calls answers ``True``
        against a working service, within the call deadline, and never raises (a probe
        that fails keeps the breaker open for good)."""
        start = time.monotonic()
        try:
            ok = transport.health()
        except Exception as e:
            pytest.fail(f"health() raised {type(e).__name__}: {e} (a probe answers True or False)")
        took = time.monotonic() - start
        assert ok is True, f"health() returned {ok!r} against a working service (expected True)"
        assert took <= self.call_deadline_s, (
            f"health() took {took:.1f} s (deadline {self.call_deadline_s:g} s)"
        )

    @level(3)
    def test_transport_write_is_never_partially_visible(self, transport: Any, tkeys: Any) -> None:
        """Readers racing a writer see the whole object or nothing (1 MiB objects written
        from 256 segments): neither a read nor ``exists`` may show an object that is
        still being written (an object written in place under its final name shows its
        partial size to ``exists`` between the segments). The race is tried on up to 64
        objects (at most ~1.5 s of writing), ending at the first partial object seen: a
        file written in place shows within a few objects."""
        big, parts = 1 << 20, 256
        keys = tkeys("partial", 64)
        (probe,) = tkeys("partial-probe")
        assert self._put(transport, probe, P.pattern(probe, big)), "a 1 MiB write reported False"
        self._read_back(transport, probe, P.pattern(probe, big), "a 1 MiB object, with no writer racing")
        bad: list[str] = []
        done = threading.Event()
        started = threading.Barrier(3)
        # the object being written, and its bytes: the readers aim at it
        current: list[tuple[str, bytes] | None] = [None]

        def reader(use_exists: bool) -> None:
            dst = _buf(big)
            started.wait()
            while not done.is_set():
                now = current[0]
                if now is None:
                    time.sleep(0)
                    continue
                k, want = now
                time.sleep(0)  # let the writer run between two looks
                if use_exists:
                    size = transport.exists([k])[0]
                    if size not in (None, big, SIZE_UNKNOWN):
                        bad.append(f"{k}: exists reported {size} of {big} bytes while it was written")
                    continue
                (ok,) = transport.read([k], [_segs(dst)])
                if ok and bytes(dst.numpy()) != want:
                    bad.append(f"{k}: a read returned True with bytes that are not the object's")

        threads = [threading.Thread(target=reader, args=(e,)) for e in (False, True)]
        for th in threads:
            th.start()
        started.wait()
        budget = time.monotonic() + 1.5
        try:
            for k in keys:
                data = P.pattern(k, big // parts) * parts  # each object's own bytes, made fast
                current[0] = (k, data)
                assert self._put(transport, k, data, parts=parts)
                current[0] = None
                if bad or time.monotonic() > budget:
                    break
        finally:
            done.set()
            for th in threads:
                th.join()
        assert not bad, f"a partially written object was visible: {bad[:3]}"
