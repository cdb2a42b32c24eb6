"""A page is wholly there or absent: truncated, corrupted, foreign or wrong-sized objects
are misses and are deleted (``integrity_deleted``); header format checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from paged_helpers import StorageFactory, hkey, mha, mla, page_bytes, randomize, scattered_slots

from hicache_sdk.memory import MemoryTransport
from hicache_sdk.paged.header import HEADER_SIZE, HeaderError, PageHeader, crc32_segments, digest


def _object_name(s, key: str) -> str:  # type: ignore[no-untyped-def]
    objs = s._kv.objects(s.scheme, key, ())
    assert len(objs) == 1
    return objs[0].name


def _replace(store: str, name: str, data: bytes) -> None:
    t = MemoryTransport(store)
    t.delete([name])
    arr = np.frombuffer(data, dtype=np.uint8).copy()
    assert t.write([name], [[(arr.ctypes.data, len(data))]]) == [True]


def _raw(store: str, name: str) -> bytes:
    t = MemoryTransport(store)
    size = t.exists([name])[0]
    assert size is not None
    buf = np.empty(size, dtype=np.uint8)
    assert t.read([name], [[(buf.ctypes.data, size)]]) == [True]
    return buf.tobytes()


def _flip(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0xFF
    return bytes(b)


CORRUPTIONS = {
    "truncated": lambda d: d[:-1],
    "extended": lambda d: d + b"\0",
    # offsets inside the integrity record, which is the object's trailer
    "magic": lambda d: _flip(d, len(d) - HEADER_SIZE + 0),
    "version": lambda d: _flip(d, len(d) - HEADER_SIZE + 4),
    "flags": lambda d: _flip(d, len(d) - HEADER_SIZE + 9),
    "identity": lambda d: _flip(d, len(d) - HEADER_SIZE + 30),
    "page": lambda d: _flip(d, len(d) - HEADER_SIZE + 60),
    "length": lambda d: _flip(d, len(d) - HEADER_SIZE + 16),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupt_object_is_miss_and_deleted(
    make_storage: StorageFactory, store: str, corruption: str
) -> None:
    src, dst = randomize(mha(), 1), mha()
    s, r = make_storage(src), make_storage(dst)
    keys = [hkey(i, "c") for i in range(3)]
    slots = scattered_slots(src, 3)
    assert s.batch_set_v1(keys, slots) == [True] * 3
    name = _object_name(s, keys[1])
    _replace(store, name, CORRUPTIONS[corruption](_raw(store, name)))
    d = scattered_slots(dst, 3, seed=4)
    assert r.batch_get_v1(keys, d) == [True, False, True]
    assert r.metrics.counter("integrity_deleted") == 1
    assert MemoryTransport(store).exists([name]) == [None]
    assert r.batch_exists(keys) == 1
    # rewritable after deletion
    assert s.batch_set_v1(keys, slots) == [True] * 3
    assert r.batch_get_v1(keys, d) == [True] * 3
    assert page_bytes(dst, int(d[4])) == page_bytes(src, int(slots[4]))


def test_wrong_size_object_is_missing_on_exists_and_deleted(make_storage: StorageFactory, store: str) -> None:
    s = make_storage(randomize(mha(), 1))
    keys = [hkey(i, "e") for i in range(3)]
    assert s.batch_set_v1(keys, scattered_slots(s.mem_pool_host, 3)) == [True] * 3
    name = _object_name(s, keys[0])
    _replace(store, name, _raw(store, name)[:-5])
    assert s.batch_exists(keys) == 0
    assert s.metrics.counter("integrity_deleted") == 1
    assert MemoryTransport(store).exists([name]) == [None]


def test_checksum_mismatch_is_miss(make_storage: StorageFactory, store: str) -> None:
    src = randomize(mha(), 1)
    s = make_storage(src, extra={"checksum": True})
    r = make_storage(mha())  # a reader without checksum still verifies one that is present
    k = hkey(0, "crc")
    assert s.batch_set_v1([k], scattered_slots(src, 1)) == [True]
    name = _object_name(s, k)
    _replace(store, name, _flip(_raw(store, name), 3))  # a payload byte
    assert r.batch_exists([k]) == 1  # size is right: existence cannot tell
    assert r.batch_get_v1([k], scattered_slots(r.mem_pool_host, 1)) == [False]
    assert r.metrics.counter("integrity_deleted") == 1
    assert r.batch_exists([k]) == 0


def test_foreign_layout_planted_under_same_name(make_storage: StorageFactory, store: str) -> None:
    """An object of another layout (same size) under this deployment's name is rejected."""
    a = randomize(mha("page_first"), 1)
    b_pool = randomize(mha("page_first_direct"), 2)
    sa, sb = make_storage(a), make_storage(b_pool)
    k = hkey(0, "foreign")
    assert sb.batch_set_v1([k], scattered_slots(b_pool, 1)) == [True]
    foreign = _raw(store, _object_name(sb, k))
    name_a = _object_name(sa, k)
    assert name_a != _object_name(sb, k)
    _replace(store, name_a, foreign)
    assert sa.batch_get_v1([k], scattered_slots(a, 1)) == [False]
    assert sa.metrics.counter("integrity_deleted") == 1


def test_mla_foreign_dtype_raw_payload_rejected(make_storage: StorageFactory, store: str) -> None:
    p = randomize(mla(), 1)
    s = make_storage(p, is_mla_model=True)
    k = hkey(0)
    name = _object_name(s, k)
    _replace(store, name, bytes(HEADER_SIZE + s._kv.layout.page_bytes))
    assert s.batch_get_v1([k], scattered_slots(p, 1)) == [False]
    assert s.batch_get([k]) == [None]


def test_header_round_trip_and_rejections() -> None:
    ident, page = digest(b"identity"), digest("page")
    h = PageHeader(ident, page, 1234, 0xDEADBEEF)
    raw = h.encode()
    assert len(raw) == HEADER_SIZE
    back = PageHeader.decode(raw)
    assert back == h
    back.check(identity=ident, page=page, payload_len=1234)
    assert PageHeader.decode(PageHeader(ident, page, 5).encode()).checksum is None
    for kwargs, reason in (
        ({"identity": digest(b"x"), "page": page, "payload_len": 1234}, "identity"),
        ({"identity": ident, "page": digest("q"), "payload_len": 1234}, "page"),
        ({"identity": ident, "page": page, "payload_len": 1}, "length"),
    ):
        with pytest.raises(HeaderError) as ei:
            back.check(**kwargs)  # type: ignore[arg-type]
        assert ei.value.reason == reason
    for at, reason in (
        (0, "magic"),
        (4, "version"),
        (6, "version"),
        (8, "flags"),
        (12, "flags"),
        (92, "flags"),
    ):
        with pytest.raises(HeaderError) as ei:
            PageHeader.decode(_flip(raw, at))
        assert ei.value.reason == reason
    with pytest.raises(HeaderError):
        PageHeader.decode(raw[:-1])
    with pytest.raises(ValueError):
        PageHeader(b"short", page, 1).encode()


def test_crc32_segments_matches_zlib() -> None:
    import zlib

    a = torch.arange(100, dtype=torch.uint8)
    b = torch.arange(50, dtype=torch.uint8)
    segs = [(a.data_ptr(), 100), (b.data_ptr(), 50), (b.data_ptr(), 0)]
    assert crc32_segments(segs) == zlib.crc32(bytes(a.numpy()) + bytes(b.numpy()))
    assert crc32_segments([]) == 0
