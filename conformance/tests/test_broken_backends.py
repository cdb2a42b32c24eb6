"""The suite proves it can fail: each broken backend fails the test named for its fault.

All broken backends run in one pytest subprocess (one class each, ``-k`` selecting the
named test), which keeps the interpreter start-up cost to one."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from typing import Any

import pytest

BROKEN = [
    "hicache_conformance.broken.semantic:ExistsCountsNonConsecutive",
    "hicache_conformance.broken.semantic:GetReturnsOtherPage",
    "hicache_conformance.broken.semantic:SetRewritesExisting",
    "hicache_conformance.broken.semantic:MissingPageRaises",
    "hicache_conformance.broken.io:HalfWrittenPageVisible",
    "hicache_conformance.broken.io:HangsWhileDown",
    "hicache_conformance.broken.io:ReadLandsAfterDeadline",
]
REFERENCE = "hicache_conformance.broken.reference:ReferenceStorage"
#: Faults the stateful comparison with the memory reference must catch as well.
STATEFUL = "test_matches_reference_model"
ALSO_FAILS = {"SetRewritesExisting": STATEFUL, "GetReturnsOtherPage": STATEFUL}

CLASS = """
from {module} import {cls} as _B_{cls}


class Test_{cls}(BackendSuite):
    backend = _B_{cls}
    matrix = "minimal"
    call_deadline_s = 2.0
    stateful_shrink = False

    @pytest.fixture
    def fault_hooks(self):
        from hicache_conformance.broken.io import hooks_for
        return hooks_for(_B_{cls})
"""


def _fails(target: str) -> str:
    module, cls = target.split(":")
    return str(getattr(importlib.import_module(module), cls).FAILS)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("broken")
    src = ["import pytest", "from hicache_conformance import BackendSuite"]
    selectors = []
    for target in [*BROKEN, REFERENCE]:
        module, cls = target.split(":")
        src.append(CLASS.format(module=module, cls=cls))
        names = [_fails(t) for t in BROKEN] if target == REFERENCE else [_fails(target)]
        names += [STATEFUL] if target == REFERENCE else [ALSO_FAILS[cls]] if cls in ALSO_FAILS else []
        selectors.append(f"(Test_{cls} and ({' or '.join(names)}))")
    test_file = tmp / "test_broken_suite.py"
    test_file.write_text("\n".join(src))
    (tmp / "pytest.ini").write_text("[pytest]\n")
    out = tmp / "report.json"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(test_file),
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        str(tmp / "pytest.ini"),
        "--rootdir",
        str(tmp),
        "--hicache-report",
        str(out),
        "-k",
        " or ".join(selectors),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data: dict[str, Any] = json.loads(out.read_text())
    data["_rc"] = proc.returncode
    return data


def _outcomes(report: dict[str, Any], cls: str, test: str) -> list[str]:
    return [
        t["outcome"]
        for nid, t in report["tests"].items()
        if f"Test_{cls}::" in nid and nid.split("::")[-1].split("[")[0] == test
    ]


@pytest.mark.parametrize("target", BROKEN, ids=[t.split(":")[1] for t in BROKEN])
def test_suite_fails_broken_backend_in_named_test(report: dict[str, Any], target: str) -> None:
    cls = target.split(":")[1]
    got = _outcomes(report, cls, _fails(target))
    assert got and set(got) == {"failed"}, (target, got)


@pytest.mark.parametrize("cls", sorted(ALSO_FAILS))
def test_stateful_comparison_catches_semantic_fault(report: dict[str, Any], cls: str) -> None:
    """The state machine against the live memory reference finds these faults too."""
    got = _outcomes(report, cls, ALSO_FAILS[cls])
    assert got == ["failed"], (cls, got)


def test_reference_passes_every_named_test(report: dict[str, Any]) -> None:
    """The correct baseline passes the same tests, so each failure is the fault's."""
    for target in BROKEN:
        got = _outcomes(report, "ReferenceStorage", _fails(target))
        if _fails(target).startswith("test_calls_bounded"):
            assert set(got) <= {"skipped"}  # the reference declares no fault injection
        else:
            assert got and set(got) == {"passed"}, (target, got)
    assert _outcomes(report, "ReferenceStorage", STATEFUL) == ["passed"]
    assert report["ok"] is False and report["_rc"] == 1
