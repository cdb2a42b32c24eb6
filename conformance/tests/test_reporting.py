"""What a failing run tells its reader, and what it costs: one pytest subprocess runs

* a backend whose transport has a programming error: the first bug's traceback is printed
  under the failing test and lands in the JSON report and the JUnit XML;
* a backend whose failure hypothesis cannot replay: reported as the shortest failing
  sequence of calls, not as hypothesis's flaky-test error;
* a backend that stores nothing, through the whole ``contract`` suite: every backend the
  suite built is closed and released by the end, also after the failures (no traceback
  keeps one alive), and no more than one test's backends are ever open at once;

and the summary names the profile of every ``BackendSuite`` class that ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent

SRC = """
import gc
from hicache_conformance import BackendSuite
from reporting_backends import BuggyReads, CountedStoresNothing, FlakyStores


class TestBuggy(BackendSuite):
    backend = BuggyReads
    matrix = "minimal"


class TestFlaky(BackendSuite):
    backend = FlakyStores
    matrix = "minimal"


class TestCounted(BackendSuite):
    backend = CountedStoresNothing
    config = {{"root": {root!r}}}
    matrix = "minimal"
    stateful_examples = 10


def test_zz_every_backend_was_closed_and_released():
    gc.collect()
    assert not CountedStoresNothing.OPEN, f"{{len(CountedStoresNothing.OPEN)}} backends never closed"
    assert len(CountedStoresNothing.LIVE) == 0, f"{{len(CountedStoresNothing.LIVE)}} backends still referenced"
    assert CountedStoresNothing.MAX_OPEN[0] <= 4, f"{{CountedStoresNothing.MAX_OPEN[0]}} backends open at once"
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("reporting")
    (tmp / "test_runs.py").write_text(SRC.format(root=str(tmp / "files")))
    (tmp / "pytest.ini").write_text("[pytest]\n")
    report, junit = tmp / "report.json", tmp / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", str(tmp / "test_runs.py"), "-p", "no:cacheprovider"]
    cmd += ["-c", str(tmp / "pytest.ini"), "--rootdir", str(tmp), "--hicache-report", str(report)]
    cmd += [
        "--junitxml",
        str(junit),
        "-k",
        "TestCounted or zz or (TestBuggy and byte_exact) or (TestFlaky and reference)",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return {
        "report": json.loads(report.read_text()),
        "junit": junit.read_text(),
        "out": proc.stdout,
        "rc": proc.returncode,
    }


def _tests(run: dict[str, Any], cls: str, name: str) -> list[dict[str, Any]]:
    return [t for nid, t in run["report"]["tests"].items() if f"{cls}::{name}" in nid]


def test_a_bug_traceback_is_shown_and_reported(run: dict[str, Any]) -> None:
    failed = [
        t for t in _tests(run, "TestBuggy", "test_get_after_set_is_byte_exact") if t["outcome"] == "failed"
    ]
    assert failed, run["out"][-3000:]
    bug = failed[0]["bug"]
    assert bug["error"] == "TypeError" and "positional argument" in bug["message"], bug
    assert "Traceback" in bug["traceback"] and "_reads_wrongly" in bug["traceback"]
    assert "hicache: the backend recorded a bug" in run["out"] and "_reads_wrongly" in run["out"]
    assert 'name="hicache_bug"' in run["junit"] and "_reads_wrongly" in run["junit"]


def test_a_bug_hypothesis_cannot_replay_is_reported_as_the_calls_that_failed(run: dict[str, Any]) -> None:
    (t,) = _tests(run, "TestFlaky", "test_matches_reference_model")
    assert t["outcome"] == "failed"
    assert "diverged from the memory reference after these calls:" in t["reason"], t["reason"][:1500]
    assert "Inconsistent data generation" not in t["reason"]
    assert "1. a new backend and an empty reference" in t["reason"]


def test_backends_are_closed_and_released_also_after_failures(run: dict[str, Any]) -> None:
    failed = [
        nid for nid, t in run["report"]["tests"].items() if "TestCounted" in nid and t["outcome"] == "failed"
    ]
    assert len(failed) >= 5, failed  # it stores nothing: most tests fail
    footprint = [ln for ln in run["out"].splitlines() if "zz_every_backend" in ln and "FAILED" in ln]
    assert not footprint, run["out"][-4000:]
    assert "test_zz_every_backend_was_closed_and_released" not in run["out"].split("short test summary")[-1]


def test_the_report_records_peak_rss_and_whose_pools(run: dict[str, Any]) -> None:
    rep = run["report"]
    rss = rep["resources"]["peak_rss_bytes"]
    assert 0 < rss["runner"] < 2 * 2**30 and rss["children"] >= 0
    assert rep["sglang"]["host_pools"]["kv"] in ("hicache_sdk", "sglang")
    assert "peak RSS: runner" in run["out"] and "host pools:" in run["out"]


def test_the_summary_names_each_classes_profile(run: dict[str, Any]) -> None:
    classes = run["report"]["classes"]
    assert classes["TestCounted"]["profile"] == "contract" and classes["TestBuggy"]["profile"] == "strict"
    assert "profile mixed: contract, strict" in run["out"]
    assert "profile unknown" not in run["out"]
