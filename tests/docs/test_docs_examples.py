"""The examples under docs/examples/ run, so the docs that quote them cannot rot:
each backend example goes through the conformance suite's entry (``hicache check``'s
``main``), the hit-merging example of docs/concepts.md is checked number by number."""

from __future__ import annotations

import ctypes
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from hicache_conformance.cli import main as check_main

from hicache_sdk import Capabilities, HiCacheStorageConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture(autouse=True)
def _examples_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


def _check(tmp_path: Path, ref: str, config: dict[str, Any], *extra: str) -> dict[str, Any]:
    report = tmp_path / "report.json"
    argv = [ref, "--config", json.dumps(config), "--matrix", "minimal", "--report", str(report), "-q", *extra]
    rc = check_main(argv)
    data: dict[str, Any] = json.loads(report.read_text())
    failed = {
        name: t.get("reason") for name, t in data.get("tests", {}).items() if t.get("outcome") == "failed"
    }
    assert rc == 0 and not failed, (rc, failed, data.get("error"))
    return data


def test_dirstore_example_passes_the_suite(tmp_path: Path) -> None:
    data = _check(
        tmp_path, "dirstore_backend:DirStorage", {"root": str(tmp_path / "store")}, "--profile", "strict"
    )
    assert data["ok"] is True
    passed = sum(c["passed"] for c in data["levels"].values())
    assert passed >= 40 and all(c["failed"] == 0 for c in data["levels"].values())
    verified = data["capabilities"]["verified"]
    for cap in ("persistent", "shared_across_processes", "zero_copy", "hybrid_pools", "mla", "delete"):
        assert verified[cap] == "verified", (cap, verified[cap])


def test_dirstore_capabilities_are_derived_and_objects_are_files(tmp_path: Path) -> None:
    from dirstore_backend import DirStorage, DirTransport

    assert DirStorage.capabilities == Capabilities(
        zero_copy=True,
        hybrid_pools=True,
        mla=True,
        persistent=True,
        shared_across_processes=True,
        delete=True,
        health=True,
    )
    root = tmp_path / "objs"
    t = DirTransport(DirStorage.config_cls.from_mapping({"root": str(root)}))
    buf = bytearray(b"abcdefgh")
    arr = (ctypes.c_char * 8).from_buffer(buf)
    addr = ctypes.addressof(arr)
    assert t.write(["ns/a"], [[(addr, 4), (addr + 4, 4)]]) == [True]
    assert (root / "ns%2Fa").read_bytes() == b"abcdefgh"
    buf[:] = b"zzzzzzzz"
    assert t.write(["ns/a"], [[(addr, 8)]]) == [True]  # create-if-absent: not rewritten
    assert (root / "ns%2Fa").read_bytes() == b"abcdefgh"
    assert t.exists(["ns/a", "ns/b"]) == [8, None]
    assert t.read(["ns/a"], [[(addr, 4)]]) == [False]  # size mismatch is never a hit
    assert t.read(["ns/a"], [[(addr, 8)]]) == [True] and bytes(buf) == b"abcdefgh"
    t.clear("ns/")
    assert t.exists(["ns/a"]) == [None] and list(root.iterdir()) == []
    t.close()


def test_dirstore_registered_by_name(tmp_path: Path) -> None:
    from dirstore_backend import DirStorage

    from hicache_sdk.registry import create_backend, register_backend, unregister_backend

    register_backend("dirstore", DirStorage)
    try:
        b = create_backend("dirstore", config={"root": str(tmp_path)})
        assert isinstance(b, DirStorage) and b.config.root == str(tmp_path)
        b.close()
    finally:
        unregister_backend("dirstore")


def test_cancellable_dirstore_example_passes_the_suite_on_its_cancellable_path(tmp_path: Path) -> None:
    """The "Cancellable transports" section works as written: the example certifies with a
    transfer deadline, so every transfer ran on caller memory with a cancel token."""
    config = {"root": str(tmp_path / "store"), "transfer_timeout_s": 5.0}
    data = _check(tmp_path, "dirstore_cancellable:CancellableDirStorage", config, "--profile", "strict")
    assert data["ok"] is True and sum(c["passed"] for c in data["levels"].values()) >= 40


def test_cancellable_dirstore_never_touches_caller_memory_once_cancelled(tmp_path: Path) -> None:
    import torch
    from dirstore_cancellable import CancellableDirStorage, CancellableDirTransport

    from hicache_sdk import Cancelled, CancelToken, MHAHostPool

    seen: list[object] = []
    real_read = CancellableDirTransport.read

    def spy(self: Any, keys: Any, buffers: Any, cancel: Any = None) -> list[bool]:
        seen.append(cancel)
        return real_read(self, keys, buffers, cancel)

    cfg = HiCacheStorageConfig(extra_config={"root": str(tmp_path), "transfer_timeout_s": 5.0})
    b = CancellableDirStorage(cfg, {})
    pool = MHAHostPool(64, 4, 2, 2, 8, dtype=torch.float16)
    b.register_mem_pool_host(pool)
    pool.kv_buffer.view(torch.uint8).random_(0, 255)
    keys = [f"{i:064x}" for i in range(2)]
    idx = torch.arange(0, 2 * pool.page_size, dtype=torch.int64)
    CancellableDirTransport.read = spy  # type: ignore[method-assign]
    try:
        assert b.batch_set_v1(keys, idx) == [True, True]
        assert b.batch_get_v1(keys, idx + 2 * pool.page_size) == [True, True]
    finally:
        CancellableDirTransport.read = real_read  # type: ignore[method-assign]
    assert seen and all(isinstance(t, CancelToken) for t in seen)  # the zero-copy path ran
    b.close()

    t = CancellableDirTransport(CancellableDirStorage.config_cls.from_mapping({"root": str(tmp_path / "t")}))
    src = bytearray(b"abcdefgh")
    addr = ctypes.addressof((ctypes.c_char * 8).from_buffer(src))
    assert t.write(["k"], [[(addr, 8)]]) == [True]
    dst = bytearray(8)
    daddr = ctypes.addressof((ctypes.c_char * 8).from_buffer(dst))
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        t.read(["k"], [[(daddr, 8)]], cancel=token)
    assert dst == bytearray(8)  # cancelled: the caller's buffer was never touched
    assert t.read(["k"], [[(daddr, 8)]], cancel=CancelToken()) == [True] and dst == src
    t.close()


def test_contract_example_passes_the_contract_profile(tmp_path: Path) -> None:
    data = _check(tmp_path, "contract_backend:DictPagesStorage", {}, "--profile", "contract")
    assert data["ok"] is True
    assert sum(c["passed"] for c in data["levels"].values()) >= 10
    # declares nothing: capabilities inferred from the methods (no v1, no v2; clear -> delete)
    assert data["capabilities"]["inferred"] == ["delete"]


def test_contract_example_round_trip_on_the_generic_path() -> None:
    import torch
    from contract_backend import DictPagesStorage

    b = DictPagesStorage(HiCacheStorageConfig(model_name="m", extra_config={"namespace": "doc-rt"}), {})
    page = torch.arange(16, dtype=torch.float32)
    assert b.batch_set(["h0", "h1"], [page, page + 1]) is True
    assert b.set("h0", page + 5) is True  # existing: success, not rewritten
    assert b.batch_exists(["h0", "h1", "h2", "h0"]) == 2
    out = torch.empty(16)
    assert b.get("h0", out) is out and torch.equal(out, page)
    assert b.get("h2", out) is None
    b.clear()
    assert b.exists("h0") is False


def _printed_output_is_quoted_in_concepts(capsys: pytest.CaptureFixture[str]) -> None:
    printed = capsys.readouterr().out.strip()
    page = (EXAMPLES.parent / "concepts.md").read_text(encoding="utf-8")
    assert printed and f"```\n{printed}\n```" in page, "docs/concepts.md quotes other output:\n" + printed


def test_hit_merging_example_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    import hit_merging

    out = hit_merging.main()
    _printed_output_is_quoted_in_concepts(capsys)
    fold, backend, ranks = out["fold"], out["memory backend"], out["two ranks"]
    assert fold["0.5.23 kv_hit_pages"] == 5 and fold["0.5.23 restorable_prefix_pages"] == [5]
    assert fold["min-of-maxima kv_hit_pages"] == 8
    assert fold["0.5.23 extra_pool_hit_pages"] == {"kv": 10, "mamba": 8, "swa": 9}
    assert backend == {
        "kv_hit_pages": 5,
        "restorable_prefix_pages": [5],
        "extra_pool_hit_pages": {"kv": 10, "mamba": 8, "swa": 9},
    }
    assert ranks["rank0 restorable"] == [5] and ranks["rank1 restorable"] == [8]
    assert ranks["agreed hit pages"] == 0


def test_excerpts_in_the_docs_are_verbatim_parts_of_the_examples() -> None:
    """A python block of docs/*.md whose first line is ``# docs/examples/X.py (excerpt)``
    must appear, minus that line, verbatim in X.py."""
    import re

    docs = EXAMPLES.parent
    found = 0
    for page in sorted(docs.glob("*.md")):
        for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            first, _, body = block.partition("\n")
            m = re.fullmatch(r"# docs/examples/(\w+\.py) \(excerpt\)", first.strip())
            if not m:
                continue
            found += 1
            source = (EXAMPLES / m.group(1)).read_text(encoding="utf-8")
            assert body in source, f"{page.name}: an excerpt of {m.group(1)} is not in the file:\n{body}"
    assert found >= 5


def test_transport_kit_declaration_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first python block of docs/transport-kit.md is a complete declaration: it runs,
    and the derived capabilities are what the page says (its import line was broken once:
    ``setting`` is not exported from ``hicache_sdk``)."""
    import re

    page = (EXAMPLES.parent / "transport-kit.md").read_text(encoding="utf-8")
    block = re.findall(r"```python\n(.*?)```", page, re.S)[0]
    mod = types.ModuleType("transport_kit_example")
    monkeypatch.setitem(sys.modules, mod.__name__, mod)  # dataclasses look the module up
    exec(compile(block, "transport-kit.md", "exec"), mod.__dict__)
    ns = mod.__dict__
    caps = ns["MyStorage"].capabilities
    assert caps == Capabilities(
        zero_copy=True, hybrid_pools=True, mla=True, persistent=True, delete=True, health=True
    )
    cfg = ns["MyConfig"].from_mapping({"max_value_bytes": "64mb", "connect_timeout_s": "500ms"}, environ={})
    assert (cfg.max_value_bytes, cfg.connect_timeout_s) == (64 << 20, 0.5)


def test_every_test_the_docs_cite_exists() -> None:
    """``path.py::test_name``, ``::test_name`` (same file as the previous citation),
    ``conformance::test_name`` and bare ``tests/...py`` citations in docs/*.md name real tests."""
    import re

    root = EXAMPLES.parents[1]
    suite = "\n".join(
        p.read_text(encoding="utf-8") for p in (root / "conformance/hicache_conformance/suite").glob("*.py")
    )
    checked = 0
    for page in sorted((root / "docs").glob("*.md")):  # backends/*.md cite paths relative to their folder
        text = page.read_text(encoding="utf-8")
        last_file: str | None = None
        for m in re.finditer(r"`((?:[\w./-]+\.py)|conformance)?::(test_\w+)", text):
            path, name = m.group(1), m.group(2)
            if path == "conformance":
                assert re.search(rf"def {name}\b", suite), f"{page.name}: conformance::{name} does not exist"
                last_file = "conformance"
            else:
                path = path or last_file
                assert path, f"{page.name}: ::{name} without a file"
                last_file = path
                body = suite if path == "conformance" else (root / path).read_text(encoding="utf-8")
                assert re.search(rf"def {name}\b", body), f"{page.name}: {path}::{name} does not exist"
            checked += 1
        for m in re.finditer(r"`((?:tests|backends|conformance)/[\w./-]+\.py)`", text):
            assert (root / m.group(1)).exists(), f"{page.name}: {m.group(1)} does not exist"
    assert checked >= 50


def test_three_hits_example_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    import three_hits

    out = three_hits.main()
    _printed_output_is_quoted_in_concepts(capsys)
    cold, failed = out["cold"], out["cold, H2D copy fails"]
    assert out["warm"]["why_not"] == ["below_threshold"] and out["warm"]["prefill computed tokens"] == 64
    assert cold["in_l3"] == {"answer": True, "tokens": 64, "candidate_tokens": 64}
    assert cold["committed_to_gpu"] == {"answer": True, "tokens": 64} and cold["prefill computed tokens"] == 0
    # same L3 hit and host fill, nothing committed: the whole prompt is recomputed
    assert failed["in_l3"] == cold["in_l3"] and failed["filled_into_host"] == cold["filled_into_host"]
    assert failed["committed_to_gpu"] == {"answer": False, "tokens": 0}
    assert failed["why_not"] == ["transfer_failed"] and failed["prefill computed tokens"] == 64


def test_every_name_the_examples_import_is_documented() -> None:
    """A name a doc example imports from the SDK is explained somewhere in docs/ (outside
    the examples themselves): in backticks, or as a call."""
    import ast
    import re

    docs = "\n".join(p.read_text(encoding="utf-8") for p in EXAMPLES.parent.rglob("*.md"))
    quoted = set(re.findall(r"\w+", " ".join(re.findall(r"`([^`\n]+)`", docs))))
    missing = []
    for path in sorted(EXAMPLES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hicache_sdk"):
                for alias in node.names:
                    name = alias.name
                    if name not in quoted:
                        missing.append(f"{path.name}: {node.module}.{name}")
    assert not missing, f"imported by an example but documented nowhere in docs/: {missing}"
