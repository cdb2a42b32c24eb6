"""``hicache bench``: real runs of the memory and file backends at tiny sizes, the JSON
documents they produce, the progress bar, and ``bench plot``."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from hicache_sdk.bench import SCHEMA
from hicache_sdk.bench.plot import load_docs, series
from hicache_sdk.cli import main
from hicache_sdk.memory import drop_store

TINY = ["--page-bytes", "4Ki", "8Ki", "--batch", "1", "3", "--repeats", "3", "--progress", "never"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _bench(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    rc = main(["bench", *argv])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip().startswith("[") else []), err


@pytest.fixture
def store() -> Any:
    name = f"bench-{uuid.uuid4().hex}"
    yield json.dumps({"store": name})
    drop_store(name)


def _check_docs(docs: list[dict[str, Any]], backend: str, api: str = "v1") -> None:
    assert len(docs) == 2 * 2 * 3  # page sizes x batches x ops
    cells = [(d["params"]["page_bytes"], d["params"]["batch"], d["params"]["op"]) for d in docs]
    assert cells == [(pb, b, op) for pb in (4096, 8192) for b in (1, 3) for op in ("set", "get", "exists")]
    for d in docs:
        p = d["params"]
        assert d["schema"] == SCHEMA and d["repeats"] == 3
        assert d["name"] == f"{backend}-{p['op']}-{p['page_bytes'] // 1024}KiB-b{p['batch']}"
        assert p["backend"] == backend and p["api"] == api and p["failures"] == 0
        assert p["layout"] == "page_first" and p["tokens_per_page"] == 16
        ours = d["results"]["ours"]
        assert len(ours["samples_s"]) == 3 and all(s > 0 for s in ours["samples_s"])
        assert ours["min_s"] <= ours["p50_s"] <= ours["p90_s"] <= ours["p99_s"] <= ours["max_s"]
        assert ours["p50_s"] == ours["median_s"]
        if p["op"] == "exists":
            assert set(d["results"]) == {"ours"} and ours["nbytes"] == 0 and ours["gbps"] == 0.0
            assert d["ratios"] == {}
        else:
            assert set(d["results"]) == {"ours", "limit_memcpy"}
            assert ours["nbytes"] == d["results"]["limit_memcpy"]["nbytes"] == p["batch"] * p["page_bytes"]
            assert ours["gbps"] == pytest.approx(ours["nbytes"] / ours["median_s"] / 1e9)
            ratio = d["ratios"]["ours/limit_memcpy"]
            assert ratio == pytest.approx(ours["median_s"] / d["results"]["limit_memcpy"]["median_s"])


def test_memory_backend_json(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, docs, err = _bench(capsys, "memory", "--config", store, *TINY, "--json")
    assert rc == 0, err
    _check_docs(docs, "memory")


def test_file_backend_json_and_cleanup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("hicache_backend_file")
    root = tmp_path / "root"
    out = tmp_path / "file.json"
    cfg = json.dumps({"root": str(root)})
    rc, docs, err = _bench(capsys, "file", "--config", cfg, *TINY, "--json", "--out", str(out))
    assert rc == 0, err
    _check_docs(docs, "file")
    assert json.loads(out.read_text()) == docs
    assert [p for p in root.rglob("*") if p.is_file()] == []  # every page written was deleted


def test_generic_only_backend_uses_the_generic_api(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sglang"))
    try:
        name = "test_sglang_bridge_checks:GenericOnly"
        rc, docs, err = _bench(capsys, name, "--config", '{"store": "bench-generic"}', *TINY, "--json")
    finally:
        sys.path.pop(0)
        drop_store("bench-generic")
    assert rc == 0, err
    _check_docs(docs, name, api="generic")


def test_table_and_plain_progress_bar(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a if a != "never" else "always" for a in TINY]
    rc = main(["bench", "memory", "--config", store, *argv, "--ops", "exists"])
    out, err = capsys.readouterr()
    assert rc == 0
    lines = [ln.split() for ln in out.splitlines()[1:]]
    assert [(ln[0], ln[1], ln[2], ln[3]) for ln in lines] == [
        ("exists", pb, b, "ours") for pb in ("4KiB", "8KiB") for b in ("1", "3")
    ]
    assert all(ln[-1] == "keys/s" for ln in lines)
    total = 2 * 2 * (3 + 1)  # cells x (repeats + warmup)
    assert "100%" in err and (f"{total}/{total}" in err or "it/s" in err)  # plain bar, or tqdm


def test_a_missing_page_is_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = json.dumps({"store": f"bench-{uuid.uuid4().hex}", "capacity_bytes": 1})
    rc, _, err = _bench(capsys, "memory", "--config", cfg, *TINY)
    assert rc == 1 and "could not write" in err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["memory", "--page-bytes", "1000"], "multiple of 4096 B"),
        (["memory", "--ops", "set,frob"], "unknown ['frob']"),
        (["memory", "--batch", "0"], "positive integer"),
        (["no-such-backend"], "no-such-backend"),
        (["memory", "--config", '{"stor": 1}'], "did you mean 'store'"),
    ],
)
def test_bad_input_exits_2(argv: list[str], match: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _bench(capsys, *argv)
    assert rc == 2 and match in err


def test_missing_matplotlib_names_the_extra(
    tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    rc, docs, err = _bench(capsys, "memory", "--config", store, *TINY, "--plot", str(tmp_path / "x.png"))
    assert rc == 2 and "pip install 'hicache-sdk[plot]'" in err and docs == []
    assert not (tmp_path / "x.png").exists()
    (tmp_path / "a.json").write_text("[]")
    rc, _, err = _bench(capsys, "plot", str(tmp_path / "a.json"), "-o", str(tmp_path / "y.png"))
    assert rc == 2 and "hicache-sdk[plot]" in err


def test_series_from_this_command_and_a_backend_script(tmp_path: Path, store: str) -> None:
    from hicache_sdk.bench import Harness

    assert (
        main(["bench", "memory", "--config", store, *TINY, "--json", "--out", str(tmp_path / "m.json")]) == 0
    )
    h = Harness("redis-get-256KiB", {"pages": 128, "page_bytes": 262144})
    h.add("ours", lambda: None, nbytes=1 << 20)
    h.add("raw_redis_py_mget", lambda: None, nbytes=1 << 20)
    (tmp_path / "r.jsonl").write_text(json.dumps(h.run(repeats=2, warmup=0).to_json()) + "\n")
    docs = load_docs([tmp_path / "m.json", tmp_path / "r.jsonl"])
    got = {(s.backend, s.op, s.page_bytes, s.label): s for s in series(docs)}
    mem = got[("memory", "get", 4096, "ours")]
    assert [x for x, _ in mem.points] == [1.0, 3.0] and mem.kind == "ours" and mem.unit == "GB/s"
    assert got[("memory", "set", 8192, "limit_memcpy")].kind == "limit"
    assert got[("memory", "exists", 4096, "ours")].unit == "keys/s"
    raw = got[("redis", "get", 262144, "raw_redis_py_mget")]
    assert raw.kind == "raw" and [x for x, _ in raw.points] == [128.0]
    (tmp_path / "bad.json").write_text(json.dumps({"schema": "other/1"}))
    with pytest.raises(ValueError, match=r"bad\.json: document 0 is not a hicache-bench/1"):
        load_docs([tmp_path / "bad.json"])


def test_plot_several_backends(tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("hicache_backend_file")
    mem, fil = tmp_path / "mem.json", tmp_path / "file.json"
    png1 = tmp_path / "mem.png"
    cfg = json.dumps({"root": str(tmp_path / "root")})
    assert main(["bench", "memory", "--config", store, *TINY, "--out", str(mem), "--plot", str(png1)]) == 0
    assert main(["bench", "file", "--config", cfg, *TINY, "--out", str(fil)]) == 0
    png2 = tmp_path / "both.png"
    assert main(["bench", "plot", str(mem), str(fil), "-o", str(png2)]) == 0
    capsys.readouterr()
    for png in (png1, png2):
        assert png.read_bytes()[:8] == PNG_MAGIC
    from PIL import Image

    w1, h1 = Image.open(png1).size
    w2, h2 = Image.open(png2).size
    assert (w2, h2) == (2 * w1, h1)  # two backends side by side, three op rows each


def test_engine_sglang_linker_needs_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    """Without an importable SGLang (this env), the linker engine says so and exits 2;
    the measurement itself is tested in tests/sglang/test_sglang_linker_bench.py."""
    try:
        import sglang.srt.mem_cache.unified_cache.linker_factory  # noqa: F401
    except Exception:
        pass
    else:
        pytest.skip("SGLang's linker imports here")
    assert main(["bench", "memory", "--engine", "sglang-linker", "--pages", "1"]) == 2
    assert "needs SGLang 0.5.23 or later" in capsys.readouterr().err
