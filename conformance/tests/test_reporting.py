"""What a failing run tells its reader, and what it costs (the runs: ``suite_runs.py``,
part ``reporting``):

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

from typing import Any

from suite_runs import Run


def _tests(run: Run, cls: str, name: str) -> list[dict[str, Any]]:
    return list(run.tests(cls, name).values())


def test_a_bug_traceback_is_shown_and_reported(suite_run: Run) -> None:
    failed = [
        t
        for t in _tests(suite_run, "TestBuggy", "test_get_after_set_is_byte_exact")
        if t["outcome"] == "failed"
    ]
    assert failed, suite_run.out[-3000:]
    bug = failed[0]["bug"]
    assert bug["error"] == "TypeError" and "positional argument" in bug["message"], bug
    assert "Traceback" in bug["traceback"] and "_reads_wrongly" in bug["traceback"]
    assert "hicache: the backend recorded a bug" in suite_run.out and "_reads_wrongly" in suite_run.out
    assert 'name="hicache_bug"' in suite_run.junit and "_reads_wrongly" in suite_run.junit


def test_a_bug_hypothesis_cannot_replay_is_reported_as_the_calls_that_failed(suite_run: Run) -> None:
    (t,) = _tests(suite_run, "TestFlaky", "test_matches_reference_model")
    assert t["outcome"] == "failed"
    assert "diverged from the memory reference after these calls:" in t["reason"], t["reason"][:1500]
    assert "Inconsistent data generation" not in t["reason"]
    assert "1. a new backend and an empty reference" in t["reason"]


def test_backends_are_closed_and_released_also_after_failures(suite_run: Run) -> None:
    failed = [
        nid
        for nid, t in suite_run.report["tests"].items()
        if "TestCounted" in nid and t["outcome"] == "failed"
    ]
    assert len(failed) >= 5, failed  # it stores nothing: most tests fail
    assert "test_zz_every_backend_was_closed_and_released" in suite_run.passed_functions(), suite_run.out[
        -4000:
    ]


def test_the_report_records_peak_rss_and_whose_pools(suite_run: Run) -> None:
    rep = suite_run.report
    rss = rep["resources"]["peak_rss_bytes"]
    assert 0 < rss["runner"] < 2 * 2**30 and rss["children"] >= 0
    assert rep["sglang"]["host_pools"]["kv"] in ("hicache_sdk", "sglang")
    assert "peak RSS: runner" in suite_run.out and "host pools:" in suite_run.out


def test_the_summary_names_each_classes_profile(suite_run: Run) -> None:
    classes = suite_run.report["classes"]
    assert classes["TestCounted"]["profile"] == "contract" and classes["TestBuggy"]["profile"] == "strict"
    assert "profile mixed: contract, strict" in suite_run.out
    assert "profile unknown" not in suite_run.out
