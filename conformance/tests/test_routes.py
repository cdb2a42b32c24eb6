"""The two certification routes (a ``BackendSuite`` test file and ``hicache check``) collect
the same tests and give them the same outcomes on the docs' ``dirstore`` example, its
in-place variant and every broken transport (the runs: ``route_runs.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from hicache_conformance.broken.transports import BROKEN_TRANSPORTS
from route_runs import BACKENDS, Routes, strip_class

LABELS = [*BACKENDS, *sorted(BROKEN_TRANSPORTS)]
#: Caught by the transport tests only (the full suite passes every other test on them).
TORN_OR_CUT = ("dirstore_in_place", "GrowsInPlace", "LargeWritesCutShort")
PARTIAL = "test_transport_write_is_never_partially_visible"


def _by_test(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {strip_class(nid): t for nid, t in report.get("tests", {}).items()}


@pytest.mark.parametrize("label", LABELS)
def test_both_routes_collect_the_same_tests(routes: Routes, label: str) -> None:
    file_ids, check_ids = routes.file_ids[label], routes.check_ids[label]
    assert len(check_ids) > 60, routes.output
    assert sorted(file_ids) == sorted(check_ids), sorted(set(file_ids) ^ set(check_ids))
    transport = [t for t in check_ids if t.startswith("test_transport_")]
    assert len(transport) == 13, transport


@pytest.mark.parametrize("label", LABELS)
def test_both_routes_give_the_same_outcomes(routes: Routes, label: str) -> None:
    via_file = {tid: t["outcome"] for tid, t in routes.file_tests[label].items()}
    via_check = {tid: t["outcome"] for tid, t in _by_test(routes.check_reports[label]).items()}
    assert len(via_check) >= 12, routes.output
    assert via_file == via_check, {
        tid: (via_file.get(tid), via_check.get(tid))
        for tid in set(via_file) | set(via_check)
        if via_file.get(tid) != via_check.get(tid)
    }
    assert routes.check_reports[label]["groups"]["transport"]["status"] == "ran"


def test_the_dirstore_example_passes_both_routes(routes: Routes) -> None:
    report = routes.check_reports["dirstore"]
    assert routes.check_rc["dirstore"] == 0 and report["ok"], routes.output
    outcomes = {t["outcome"] for t in routes.file_tests["dirstore"].values()}
    assert outcomes <= {"passed", "skipped"}, outcomes
    assert report["cleanup"]["status"] == "nothing left", report["cleanup"]
    assert report["capabilities"]["verified"]["health"] == "verified"


@pytest.mark.parametrize("label", TORN_OR_CUT)
def test_a_torn_or_cut_write_fails_both_routes(routes: Routes, label: str) -> None:
    for tests in (routes.file_tests[label], _by_test(routes.check_reports[label])):
        failed = {tid for tid, t in tests.items() if t["outcome"] == "failed"}
        assert failed == {PARTIAL}, (label, failed)
    assert routes.check_rc[label] == 1 and routes.file_report["ok"] is False


@pytest.mark.parametrize("name", sorted(BROKEN_TRANSPORTS))
def test_each_broken_transport_fails_its_test_on_both_routes(routes: Routes, name: str) -> None:
    fails = BROKEN_TRANSPORTS[name][1]
    for tests in (routes.file_tests[name], _by_test(routes.check_reports[name])):
        got = {t["outcome"] for tid, t in tests.items() if tid.split("[")[0] == fails}
        assert got == {"failed"}, (name, got)


def test_the_report_lists_groups_and_levels_with_skip_reasons(routes: Routes) -> None:
    report = routes.check_reports["dirstore"]
    transport = report["groups"]["transport"]
    assert transport["status"] == "ran" and transport["passed"] == 10 and transport["skip_reasons"] == {}
    assert report["groups"]["faults"]["status"] == "not selected", report["groups"]
    assert report["levels"]["L3-concurrency"]["status"] == "ran", report["levels"]
    assert set(report["levels_not_selected"]) == {"L0-shape", "L2-lifecycle", "L4-faults", "stateful"}


def test_a_backend_without_delete_is_told_cleanup_is_impossible(routes: Routes) -> None:
    report = routes.no_delete
    assert report["ok"] and report["capabilities"]["declared"]["delete"] is False, report.get("error")
    assert report["cleanup"]["status"] == "cleanup impossible: no delete", report["cleanup"]
