"""The out-of-band helpers, the spec-derived SGLang names and the child entry point."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from hicache_conformance.child import main as child_main
from hicache_conformance.faults import FaultState, FaultyTransport
from hicache_conformance.raw import DirectoryRawObjects, MemoryRawObjects, default_raw_objects
from hicache_conformance.suite.l1_raw import SPEC_HASH, sglang_kv_names

from hicache_sdk.memory_backend import MemoryStorage, MemoryTransport, drop_store


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
