"""``hicache bench NAME --engine sglang-linker`` as a command (a child process, tiny sizes),
inside the real SGLang 0.5.23 (collected only in ``tox -e sglang``): one run reports the
load against the raw read, the time to layer 0 layer by layer and page by page, and the
offload, and writes them as a ``hicache-bench-run/1`` file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: The command, in a child process with the stand-ins for SGLang's GPU-only imports.
CLI = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); import sglang_standins; sglang_standins.install(); "
    "from hicache_sdk.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "-c", CLI, str(HERE), "bench", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_bench_engine_sglang_linker_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    cfg = json.dumps({"root": str(tmp_path / "store")})
    done = _bench(
        "file", "--engine", "sglang-linker", "--config", cfg, "--pages", "3", "--layers", "4",
        "--tokens-per-page", "4", "--repeats", "2", "--warmup", "0", "--progress", "never",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(out.read_text())
    assert run["schema"] == "hicache-bench-run/1"
    docs = {d["name"]: d for d in run["results"]}
    assert list(docs) == [
        "linker-load-file",
        "linker-load-page-by-page-file",
        "linker-layer0-file",
        "linker-offload-file",
    ]
    page_bytes = 2 * 4 * 4 * 8 * 128 * 2  # K and V, layers, tokens, heads, head dim, bfloat16
    load = docs["linker-load-file"]
    assert load["params"] == {"pages": 3, "page_bytes": page_bytes, "layers": 4, "tokens_per_page": 4}
    assert list(load["results"]) == ["linker", "raw read", "raw ranged read"]
    pages = docs["linker-load-page-by-page-file"]["results"]
    assert list(pages) == ["linker, page by page", "raw read"]
    assert pages["raw read"]["samples_s"] == load["results"]["raw read"]["samples_s"]
    for r in [*load["results"].values(), *pages.values()]:
        assert r["nbytes"] == 3 * page_bytes
        assert len(r["samples_s"]) == 2 and all(s > 0 for s in r["samples_s"])
    assert list(docs["linker-layer0-file"]["results"]) == ["layer by layer", "page by page"]
    assert list(docs["linker-offload-file"]["results"]) == ["linker", "raw write"]
    # the table names every case and variant
    for name in docs:
        assert name in done.stdout
    assert "raw read" in done.stdout and "layer by layer" in done.stdout


def test_bench_engine_sglang_linker_refuses_a_bad_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from hicache_sdk.cli import main  # in this process: SGLang is imported already

    assert (
        main(["bench", "no-such-backend", "--engine", "sglang-linker", "--pages", "1", "--layers", "1"]) == 2
    )
    err = capsys.readouterr().err
    assert "hicache bench:" in err and "no-such-backend" in err
