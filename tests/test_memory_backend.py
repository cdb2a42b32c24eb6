"""The ``memory`` reference backend: transport semantics and storage wiring."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from hicache_sdk.errors import ConfigError
from hicache_sdk.memory import MemoryConfig, MemoryStorage, MemoryTransport, drop_store
from hicache_sdk.spec import HiCacheStorageConfig


@pytest.fixture
def store() -> Iterator[str]:
    name = f"mem-{uuid.uuid4().hex}"
    yield name
    drop_store(name)


def buf(data: bytes) -> tuple[np.ndarray, list[tuple[int, int]]]:
    arr = np.frombuffer(data, dtype=np.uint8).copy()
    return arr, [(arr.ctypes.data, len(data))]


def read(t: MemoryTransport, key: str, n: int, split: int | None = None) -> bytes | None:
    out = np.zeros(n, dtype=np.uint8)
    base = out.ctypes.data
    segs = [(base, n)] if split is None else [(base, split), (base + split, n - split)]
    return out.tobytes() if t.read([key], [segs]) == [True] else None


def test_scatter_gather_create_if_absent(store: str) -> None:
    t = MemoryTransport(store)
    a = np.frombuffer(b"hello ", dtype=np.uint8).copy()
    b = np.frombuffer(b"world", dtype=np.uint8).copy()
    assert t.write(["k"], [[(a.ctypes.data, 6), (b.ctypes.data, 5)]]) == [True]
    assert t.exists(["k", "missing", "k"]) == [11, None, 11]
    assert read(t, "k", 11, split=3) == b"hello world"
    assert read(t, "k", 10) is None  # size mismatch
    assert read(t, "missing", 11) is None
    _, segs = buf(b"XXXXXXXXXXX")
    assert t.write(["k"], [segs]) == [True]  # existing: untouched, success
    assert read(t, "k", 11) == b"hello world"
    _, s1 = buf(b"first")
    _, s2 = buf(b"secnd")
    assert t.write(["d", "d"], [s1, s2]) == [True, True]
    assert read(t, "d", 5) == b"first"
    assert t.exists([]) == [] and t.read([], []) == [] and t.write([], []) == []


def test_shared_by_store_name_and_isolated_otherwise(store: str) -> None:
    _, segs = buf(b"abc")
    MemoryTransport(store).write(["k"], [segs])
    assert MemoryTransport(store).exists(["k"]) == [3]
    assert MemoryTransport(store + "-other").exists(["k"]) == [None]
    drop_store(store + "-other")


def test_delete_and_clear_prefix(store: str) -> None:
    t = MemoryTransport(store)
    for k in ("ns/a", "ns/b", "other/c"):
        _, segs = buf(b"x")
        t.write([k], [segs])
    t.delete(["ns/a", "nope"])
    assert t.exists(["ns/a", "ns/b"]) == [None, 1]
    t.clear("ns/")
    assert t.exists(["ns/b", "other/c"]) == [None, 1]
    assert t.used_bytes() == 1
    t.clear("")
    assert t.exists(["other/c"]) == [None] and t.used_bytes() == 0


def test_capacity_lru_eviction(store: str) -> None:
    t = MemoryTransport(store, capacity_bytes=10)
    for k in ("a", "b", "c"):
        _, segs = buf(b"xxxx")
        assert t.write([k], [segs]) == [True]
    # 12 bytes > 10: "a" (least recently used) was evicted
    assert t.exists(["a", "b", "c"]) == [None, 4, 4]
    assert read(t, "b", 4) == b"xxxx"  # refresh b
    _, segs = buf(b"yyyy")
    t.write(["d"], [segs])
    assert t.exists(["b", "c", "d"]) == [4, None, 4]
    assert t.used_bytes() <= 10
    _, big = buf(b"z" * 11)
    assert t.write(["big"], [big]) == [False]  # larger than the whole capacity


def test_config_and_storage(store: str) -> None:
    assert MemoryConfig.from_mapping({"store": store, "capacity_bytes": "1024"}).capacity_bytes == 1024
    assert MemoryConfig.from_mapping({}, environ={"HICACHE_MEMORY_STORE": "envstore"}).store == "envstore"
    with pytest.raises(ConfigError):
        MemoryConfig.from_mapping({"capacity_bytes": -1})
    with pytest.raises(ConfigError):
        MemoryConfig.from_mapping({"store": ""})
    s = MemoryStorage(HiCacheStorageConfig(extra_config={"store": store, "backend_name": "x"}), {})
    assert isinstance(s.raw_transport, MemoryTransport)
    assert s.raw_transport.store_name == store
    assert s.backend_name == "memory"
    caps = MemoryStorage.capabilities
    assert (caps.persistent, caps.shared_across_processes, caps.eviction, caps.capacity_bound) == (
        False,
        False,
        True,
        True,
    )
    # kwargs overlay extra_config
    s2 = MemoryStorage(HiCacheStorageConfig(extra_config={"store": "a"}), {"store": store})
    assert s2.raw_transport.store_name == store
    s.close()
    s.close()


def test_construction_without_storage_config() -> None:
    s = MemoryStorage()
    assert s.config.store == "default"
    assert "memory" in repr(s)


def test_entry_point_declared() -> None:
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())
    eps = data["project"]["entry-points"]["hicache_sdk.backends"]
    assert eps["memory"] == "hicache_sdk.memory:MemoryStorage"
