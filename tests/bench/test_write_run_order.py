"""``write_run`` keeps each result's variants in the order they were added: the docs'
results tables (``scripts/gen_bench_docs.py``) read the first one as "ours"."""

from __future__ import annotations

import json
from pathlib import Path

from hicache_sdk.bench.harness import Harness, write_run


def test_variants_keep_their_order_in_the_file(tmp_path: Path) -> None:
    ticks = iter(range(1000))
    h = Harness("get", {"pages": 4}, timer=lambda: float(next(ticks)))
    for label in ("staged", "raw", "memcpy"):  # not alphabetical
        h.add(label, lambda: None, nbytes=1)
    path = tmp_path / "run.json"
    write_run([h.run(repeats=3, warmup=0)], path, command="python bench.py")
    (doc,) = json.loads(path.read_text(encoding="utf-8"))["results"]
    assert list(doc["results"]) == ["staged", "raw", "memcpy"]
