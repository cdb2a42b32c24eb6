"""``hicache check NAME`` certifies the backends we ship, run as docs/certifying.md tells a
user to: a subprocess, the default profile and matrix, the JSON report read (not only the
exit code). The backends that need a server certify in their own test folders, against the
real server their tests start (``backends/*/tests/test_*_cli_check.py``)."""

from __future__ import annotations

from pathlib import Path

from hicache_conformance.run import run_check


def test_memory_certifies_in_its_default_profile() -> None:
    res = run_check("memory")
    assert res.ok, (res.failures, res.output[-3000:])
    assert res.summary_line == "memory: PASS (profile strict)"
    assert res.report["profile"] == "strict"
    totals = res.totals
    assert totals["failed"] == 0 and totals["passed"] >= 150, totals
    skipped = res.outcomes("skipped")
    # persistence, two processes, health, 3 sglang-* naming tests, ranges of many objects
    assert len(skipped) == 7, skipped
    assert all(
        r.startswith("Skipped: backend does not declare")
        or "default key scheme" in r
        or "does not offer RangedReads (ranges of many objects)" in r
        for r in skipped.values()
    ), skipped


def test_file_certifies_in_its_default_profile(tmp_path: Path) -> None:
    res = run_check("file", {"root": str(tmp_path / "store")})
    assert res.ok, (res.failures, res.output[-3000:])
    assert res.summary_line == "file: PASS (profile strict)"
    totals = res.totals
    assert totals["failed"] == 0 and totals["passed"] >= 60, totals
    assert res.report["cleanup"]["status"] == "nothing left", res.report["cleanup"]
    verified = res.report["capabilities"]["verified"]
    for cap in ("persistent", "shared_across_processes", "capacity_bound", "delete", "zero_copy", "health"):
        assert verified[cap] == "verified", (cap, verified)
