"""The LMCache table of ``docs/compatibility.md`` (``scripts/compat/lmcache_matrix.py``):
rendered from a run's results, without LMCache."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "compat"))

import lmcache_matrix as M


def test_rows_give_verdict_first_failure_and_not_run() -> None:
    fs, ours = "conn_fs", "conn_ours_file"
    doc = {
        "lmcache": "0.5.6",
        "command": "x",
        "date": "d",
        "rows": {
            fs: {"ok": False, "wall_s": 3.0, "tests": {
                "T::test_a": {"outcome": "passed"},
                "T::test_b": {"outcome": "failed", "reason": "AssertionError: a | b"},
                "T::test_c": {"outcome": "failed", "reason": "later"},
                "T::test_d": {"outcome": "skipped", "reason": "no freeze"},
            }},
            ours: {"ok": True, "wall_s": 2.0, "tests": {"T::test_a": {"outcome": "passed"}}},
        },
        "outside": {"memkv-lmcache": {"installed": True, "version": "1.0.12", "imports": True}},
    }  # fmt: skip
    lines = M.render_doc(doc).splitlines()
    by = {r.name: r for r in M.ROWS}
    row = next(ln for ln in lines if ln.startswith(f"| {by[fs].title} |"))
    assert "| 1 | 2 | 1 | 3.0 s | fail | fail |" in row and "`test_b`: AssertionError: a \\| b" in row
    assert "later" not in row
    row = next(ln for ln in lines if ln.startswith(f"| {by[ours].title} |"))
    assert "| 1 | 0 | 0 | 2.0 s | pass | pass |" in row
    row = next(ln for ln in lines if ln.startswith(f"| {by['l2_fs'].title} |"))
    assert "| not run |" in row
    memkv = next(ln for ln in lines if "`memkv-lmcache`" in ln)
    assert "1.0.12, imports" in memkv and "not run: needs a MemKV cluster" in memkv
    kvb = next(ln for ln in lines if "`lmcache-kvblockd`" in ln)
    assert "not checked" in kvb


def test_every_row_names_an_engine_the_cli_knows() -> None:
    from hicache_conformance.engines import ENGINES

    assert {r.engine for r in M.ROWS} | {o.engine for o in M.OUTSIDE} <= set(ENGINES)
    assert {r.name for r in M.ROWS if r.expected == "pass"} >= {
        f"{p}_ours_{b}" for p in ("l2", "conn") for b in ("file", "redis", "s3", "mooncake")
    }
