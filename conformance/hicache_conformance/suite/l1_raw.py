"""Reads and writes tested independently of each other, through the out-of-band
``raw_pages`` helper (see :mod:`hicache_conformance.raw`); SGLang's exact object names
under the ``sglang-*`` key schemes; and the torn-page rule (a half-written page is
never a hit).

Under the ``default`` scheme the object format (header, trailer, padding) is the SDK's
business: the suite only checks that a write creates an object named after the page
hash that holds the page's bytes, that an object planted back is read, and that a
planted garbage object is a miss and is removed. Under ``sglang-*`` schemes objects
are raw pages, so bytes are compared exactly and names are SGLang 0.5.23's.
"""

from __future__ import annotations

from typing import Any

import pytest

from .. import pools as P
from ..base import Attached, BackendFactory, SuiteBase
from ..capabilities import level, strict_only
from ..matrix import PoolCase
from ..raw import RawObjects

#: The page hash of the spec's examples (sglang_hicache_spec.md 3.3).
SPEC_HASH = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"
SPEC_MODEL = "meta-llama/Llama-3.2-1B"

# (id, kind, tp_rank, tp_size) of the spec examples.
_EXAMPLES = [("mha-tp0of1", "mha", 0, 1), ("mha-tp1of2", "mha", 1, 2), ("mla-tp0of4", "mla", 0, 4)]


def sglang_kv_names(
    scheme: str, page_hash: str, model: str, kind: str, tp_rank: int, tp_size: int
) -> list[str]:
    """SGLang 0.5.23's object names of one KV page (no PP / CP / DCP), written out from
    the spec rather than taken from the SDK's key schemes: ``sglang-file``
    ``<hash>_<model>[_<tp>_<tp_size>].bin`` (no tp part for MLA); ``sglang-mooncake``
    ``<model>_<hash>_<tp>_k`` / ``_v`` for MHA, ``<model>_<hash>__k`` for MLA. ``model``
    has ``/`` replaced by ``-``. Raises ``ValueError`` naming ``scheme`` otherwise."""
    m = model.replace("/", "-")
    if scheme == "sglang-file":
        return [f"{page_hash}_{m}.bin"] if kind == "mla" else [f"{page_hash}_{m}_{tp_rank}_{tp_size}.bin"]
    if scheme == "sglang-mooncake":
        tagged = f"{m}_{page_hash}" if m else page_hash
        return [f"{tagged}__k"] if kind == "mla" else [f"{tagged}_{tp_rank}_k", f"{tagged}_{tp_rank}_v"]
    raise ValueError(f"scheme must be 'sglang-file' or 'sglang-mooncake', got {scheme!r}")


def _split(data: bytes, n: int) -> list[bytes]:
    """``data`` cut into ``n`` equal consecutive parts (MHA K then V in a flat page)."""
    size = len(data) // n
    return [data[i * size : (i + 1) * size] for i in range(n)]


class RawObjectTests(SuiteBase):
    def _raw(self, raw_pages: Any) -> RawObjects:
        if raw_pages is None:
            pytest.skip("no raw_pages fixture (out-of-band object access) for this backend")
        return raw_pages  # type: ignore[no-any-return]

    def _sglang(self) -> bool:
        return self.key_scheme().startswith("sglang-")

    def _case(self) -> PoolCase:
        return PoolCase(layout="page_first")

    def _write_and_find(self, raw: RawObjects, att: Attached, key: str, page: int) -> tuple[bytes, list[str]]:
        """Write ``key`` through the backend; (its bytes, the new objects named after it)."""
        before = set(raw.names(att.backend))
        ok, (data,) = self.write(att, [key], page)
        assert ok == [True]
        new = sorted(n for n in set(raw.names(att.backend)) - before if key in n)
        assert new, "a page written through the backend created no object named after its hash"
        return data, new

    @level(1)
    def test_write_is_visible_out_of_band(self, backend_factory: BackendFactory, raw_pages: Any) -> None:
        raw = self._raw(raw_pages)
        case = self._case()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        (key,) = self.keys(backend_factory.namespace, "oob-write", 1)
        data, new = self._write_and_find(raw, att, key, 0)
        if self._sglang():
            names = sglang_kv_names(self.key_scheme(), key, "conformance/model", case.kind, 0, 1)
            assert new == sorted(names), f"objects {new} are not SGLang's {names}"
            parts = _split(data, len(names))
            assert [raw.get(att.backend, n) for n in names] == parts, "stored bytes are not the raw page"
        else:
            assert len(new) == 1, f"one page became {len(new)} objects: {new}"
            stored = raw.get(att.backend, new[0])
            assert stored is not None and data in stored, "the stored object does not hold the page's bytes"

    @level(1)
    def test_planted_object_is_read_through_backend(
        self, backend_factory: BackendFactory, raw_pages: Any
    ) -> None:
        raw = self._raw(raw_pages)
        case = self._case()
        sc = self.storage_config_for(case)
        att = self.attach(backend_factory(storage_config=sc), case)
        (key,) = self.keys(backend_factory.namespace, "oob-plant", 1)
        if self._sglang():
            nbytes = len(P._as_bytes(att.kv.get_dummy_flat_data_page()))
            data = P.pattern(f"planted:{key}", nbytes)
            names = sglang_kv_names(self.key_scheme(), key, "conformance/model", case.kind, 0, 1)
            for name, part in zip(names, _split(data, len(names))):
                raw.put(att.backend, name, part)
        else:
            data, (name,) = self._write_and_find(raw, att, key, 0)
            stored = raw.get(att.backend, name)
            assert stored is not None
            raw.delete(att.backend, name)
            assert att.backend.batch_exists([key]) == 0, "a page deleted out of band still exists"
            assert self.read(att, [key], 5) == [None], "a page deleted out of band was still read"
            raw.put(att.backend, name, stored)
        assert att.backend.batch_exists([key]) == 1, "a planted object is not seen by batch_exists"
        assert self.read(att, [key], 10) == [data], "a planted object did not read back exactly"
        fresh = self.attach(backend_factory(storage_config=sc), case)
        assert self.read(fresh, [key], 20) == [data], "a new instance did not read the planted object"

    @level(1)
    @strict_only(
        "the SDK's default scheme stores an integrity trailer with every page: an object damaged "
        "out of band (bit rot, a foreign writer) must read as a miss, never be copied into the KV pool"
    )
    def test_planted_garbage_is_a_miss_and_removed(
        self, backend_factory: BackendFactory, raw_pages: Any
    ) -> None:
        raw = self._raw(raw_pages)
        if self._sglang():
            pytest.skip(f"key scheme {self.key_scheme()!r} stores raw pages: no integrity to check")
        case = self._case()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        (key,) = self.keys(backend_factory.namespace, "oob-garbage", 1)
        _, (name,) = self._write_and_find(raw, att, key, 0)
        stored = raw.get(att.backend, name)
        assert stored is not None
        raw.put(att.backend, name, P.pattern(f"garbage:{key}", len(stored)))
        assert self.read(att, [key], 10) == [None], "a garbage object was read as a hit"
        assert raw.get(att.backend, name) is None, "a garbage object was left in the store"
        assert att.backend.batch_exists([key]) == 0

    @level(1)
    @pytest.mark.parametrize("example", _EXAMPLES, ids=[e[0] for e in _EXAMPLES])
    def test_sglang_scheme_names_spec_examples(
        self, backend_factory: BackendFactory, raw_pages: Any, example: tuple[str, str, int, int]
    ) -> None:
        if not self._sglang():
            pytest.skip("default key scheme: the isolation / sharing tests apply instead")
        raw = self._raw(raw_pages)
        _, kind, tp_rank, tp_size = example
        if kind == "mla" and not self.capabilities_of().mla:
            pytest.skip("backend does not declare mla")
        case = PoolCase(kind=kind, layout="page_first")
        sc = self.storage_config_for(case, model_name=SPEC_MODEL, tp_rank=tp_rank, tp_size=tp_size)
        att = self.attach(backend_factory(storage_config=sc), case)
        data, new = self._write_and_find(raw, att, SPEC_HASH, 0)
        names = sglang_kv_names(self.key_scheme(), SPEC_HASH, SPEC_MODEL, kind, tp_rank, tp_size)
        assert new == sorted(names), f"objects {new} are not SGLang's {names}"
        assert [raw.get(att.backend, n) for n in names] == _split(data, len(names))

    @level(3)
    def test_half_written_page_never_a_hit(self, backend_factory: BackendFactory, raw_pages: Any) -> None:
        """Every hit is the whole page: a page whose tail never reached the store (or
        an object cut short out of band) reads as a miss, never as a hit."""
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        keys = self.keys(backend_factory.namespace, "torn", 4)
        ok, data = self.write(att, keys, 0)
        assert ok == [True] * 4, f"a write of 4 new pages returned {ok}, expected [True] * 4"
        half = len(data[0]) // 2
        for i, (got, want) in enumerate(zip(self.read(att, keys, 10), data)):
            if got is None:
                continue
            assert got[:half] != want[:half] or got[half:] == want[half:], (
                f"page {i}: a half-written page (tail missing) was visible as a hit"
            )
            assert got == want, f"page {i} read back bytes that are not the page written"
        if raw_pages is None:
            pytest.skip(
                "in-band half passed; the out-of-band half (an object cut short below the backend) "
                "did not run: no raw_pages access for this backend"
            )
        raw: RawObjects = raw_pages
        (cut,) = self.keys(backend_factory.namespace, "torn-cut", 1)
        _, new = self._write_and_find(raw, att, cut, 20)
        stored = raw.get(att.backend, new[0])
        assert stored is not None, f"the object {new[0]!r} the write created is not readable out of band"
        raw.put(att.backend, new[0], stored[: len(stored) // 2])
        try:
            got = self.read(att, [cut], 30)
        except Exception as e:
            if self.active_profile() == "strict":
                pytest.fail(
                    f"an object cut short out of band raised {type(e).__name__}: {e} (strict rule: an I/O "
                    f"failure is a miss, never an exception, so callers other than SGLang's guarded "
                    f"worker threads need no try/except)"
                )
            got = [None]  # SGLang 0.5.23 wraps every storage call: an exception counts as 0 hits
        assert got == [None], "an object cut short out of band was read as a hit"
