"""The out-of-band helpers, the spec-derived SGLang names and the child entry point."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hicache_conformance.child import main as child_main
from hicache_conformance.faults import FaultState, FaultyTransport
from hicache_conformance.raw import DirectoryRawObjects, MemoryRawObjects, default_raw_objects
from hicache_conformance.suite.l1_raw import SPEC_HASH, sglang_kv_names

from hicache_sdk.memory import MemoryStorage, MemoryTransport, drop_store


def test_memory_raw_objects_through_wrapping_transports() -> None:
    store = f"raw-test-{uuid.uuid4().hex[:8]}"
    inner = MemoryTransport(store=store)
    backend = SimpleNamespace(raw_transport=FaultyTransport(inner, FaultState()))
    raw = MemoryRawObjects()
    try:
        raw.put(backend, "a", b"xyz")
        raw.put(backend, "a", b"12345")
        assert raw.names(backend) == ["a"]
        assert raw.get(backend, "a") == b"12345"
        assert inner.used_bytes() == 5
        assert inner.exists(["a", "b"]) == [5, None]
        raw.delete(backend, "a")
        raw.delete(backend, "a")
        assert raw.get(backend, "a") is None and inner.used_bytes() == 0
        with pytest.raises(ValueError, match="backend"):
            raw.names(SimpleNamespace(raw_transport=None))
    finally:
        drop_store(store)


def test_directory_raw_objects(tmp_path: Path) -> None:
    backend = SimpleNamespace(root=str(tmp_path))
    raw = DirectoryRawObjects(lambda b: b.root)
    raw.put(backend, "ns/ab/page", b"data")
    raw.put(backend, "flat.bin", b"f")
    (tmp_path / ".hidden").write_bytes(b"x")
    (tmp_path / "ns" / ".tmpdir").mkdir()
    (tmp_path / "ns" / ".tmpdir" / "t").write_bytes(b"x")
    assert raw.names(backend) == ["flat.bin", "ns/ab/page"]
    assert raw.get(backend, "ns/ab/page") == b"data"
    assert raw.get(backend, "nope") is None
    raw.delete(backend, "flat.bin")
    raw.delete(backend, "flat.bin")
    assert raw.names(backend) == ["ns/ab/page"]
    for bad in ("", "/etc/passwd", "../x", "a//b", "a/./b"):
        with pytest.raises(ValueError, match="name"):
            raw.get(backend, bad)


def test_default_raw_objects_only_for_memory() -> None:
    assert isinstance(default_raw_objects(MemoryStorage), MemoryRawObjects)
    assert default_raw_objects(object) is None
    assert default_raw_objects("memory") is None


def test_sglang_names_of_the_spec_examples() -> None:
    model = "meta-llama/Llama-3.2-1B"
    assert sglang_kv_names("sglang-file", SPEC_HASH, model, "mha", 0, 1) == [
        "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72_meta-llama-Llama-3.2-1B_0_1.bin"
    ]
    assert sglang_kv_names("sglang-file", "k2", "mymodel", "mha", 0, 1) == ["k2_mymodel_0_1.bin"]
    assert sglang_kv_names("sglang-file", "h", "org/model", "mla", 3, 4) == ["h_org-model.bin"]
    assert sglang_kv_names("sglang-mooncake", "h", "Qwen/Qwen3-8B", "mha", 0, 1) == [
        "Qwen-Qwen3-8B_h_0_k",
        "Qwen-Qwen3-8B_h_0_v",
    ]
    assert sglang_kv_names("sglang-mooncake", "h", "deepseek-ai/DeepSeek-V3", "mla", 2, 4) == [
        "deepseek-ai-DeepSeek-V3_h__k"
    ]
    with pytest.raises(ValueError, match="scheme"):
        sglang_kv_names("default", "h", "m", "mha", 0, 1)


def test_child_main_rejects_bad_arguments(tmp_path: Path) -> None:
    assert child_main([]) == 2
    job = tmp_path / "job.pickle"
    job.write_bytes(pickle.dumps({"not": "a job"}))
    assert child_main([str(job), str(tmp_path / "out.json")]) == 2
    assert not (tmp_path / "out.json").exists()


class _CancellableMemory(MemoryTransport):
    """A cancellable transport: every transfer must arrive with its ``cancel=`` token."""

    cancellable = True
    tokens: list[object] = []

    def read(self, keys, buffers, cancel=None):  # type: ignore[no-untyped-def,override]
        assert cancel is not None, "the resilience layer passes cancel= to a cancellable transport"
        self.tokens.append(cancel)
        return super().read(keys, buffers)

    def write(self, keys, buffers, cancel=None):  # type: ignore[no-untyped-def,override]
        assert cancel is not None, "the resilience layer passes cancel= to a cancellable transport"
        self.tokens.append(cancel)
        return super().write(keys, buffers)


class _CancellableStorage(MemoryStorage):
    transport_cls = _CancellableMemory

    def create_transport(self, config: Any) -> _CancellableMemory:
        return _CancellableMemory(store=config.store)


def test_out_of_band_write_wrapper_passes_cancel_through() -> None:
    """The suite's default out-of-band view wraps ``transport.write``; a cancellable
    transport's writes arrive with ``cancel=`` and must still store (a wrapper without the
    keyword made every write a silent miss: 54 of 80 ``hicache check redis`` tests failed)."""
    import torch
    from hicache_conformance.raw_transport import TransportRawObjects

    from hicache_sdk import HiCacheStorageConfig, MHAHostPool
    from hicache_sdk.kit import CancelToken

    store = f"raw-cancel-{uuid.uuid4().hex[:8]}"
    cfg = HiCacheStorageConfig(extra_config={"store": store, "transfer_timeout_s": 5.0})
    backend = _CancellableStorage(cfg, {})
    try:
        raw = TransportRawObjects()
        assert raw.names(backend) == []  # installs the wrapper
        pool = MHAHostPool(64, 4, 2, 2, 8, dtype=torch.float16)
        backend.register_mem_pool_host(pool)
        pool.kv_buffer.view(torch.uint8).random_(0, 255)
        keys = [f"{i:064x}" for i in range(3)]
        idx = torch.arange(0, 3 * pool.page_size, dtype=torch.int64)
        _CancellableMemory.tokens.clear()
        assert backend.batch_set_v1(keys, idx) == [True, True, True]
        assert len(raw.names(backend)) == 3
        assert backend.batch_get_v1(keys, idx + 3 * pool.page_size) == [True, True, True]
        assert _CancellableMemory.tokens and all(
            isinstance(t, CancelToken) for t in _CancellableMemory.tokens
        )
        assert backend.raw_transport.write.__wrapped__.__func__ is _CancellableMemory.write  # type: ignore[attr-defined]
    finally:
        backend.close()
        drop_store(store)
