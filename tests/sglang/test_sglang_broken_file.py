"""Deliberately broken variants of SGLang 0.5.23's real ``HiCacheFile`` fail ``contract``
on the generic and the v1 path and on MHA and MLA pools, judged with SGLang's own host
pools and controller functions; the unbroken one (with the same v1 methods) passes. No
class declares ``mla``: a class written against SGLang's ABC gets the MLA cases by
default, so a copy broken only for MLA fails; with ``-mla`` it passes and the report says
MLA was not certified.

One pytest subprocess runs every class (``-k`` selecting the round-trip and stateful
tests); its JSON report is read. Collected only in ``tox -e sglang``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sglang_broken_file import BROKEN, MLAOnlyBrokenFile

HERE = Path(__file__).resolve().parent
ROUND_TRIP = "test_get_after_set_is_byte_exact"

CLASS = """
class Test_{name}(BackendSuite):
    backend = sglang_broken_file.{name}
    profile = "contract"
    matrix = "minimal"
    extra_capabilities = {caps!r}
    stateful_shrink = False

    def namespace_config(self, namespace):
        return {{"file_storage_path": os.path.join(ROOT, namespace)}}
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("sglang-broken-file")
    names = ["FileWithV1", *(c.__name__ for c in BROKEN), "MLAOnlyBrokenFile"]
    src = [
        "import os, sys",
        f"sys.path.insert(0, {str(HERE)!r})",
        "import sglang_standins",
        "sglang_standins.install()",
        "import sglang_broken_file",
        "from hicache_conformance import BackendSuite",
        f"ROOT = {str(tmp / 'files')!r}",
        "os.environ.pop('SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR', None)",
    ]
    src += [CLASS.format(name=n, caps=()) for n in names]
    no_mla = CLASS.format(name="MLAOnlyBrokenFile", caps=("-mla",))
    src.append(no_mla.replace("class Test_MLAOnlyBrokenFile(", "class Test_NoMLA(", 1))
    (tmp / "test_broken_file.py").write_text("\n".join(src))
    (tmp / "pytest.ini").write_text("[pytest]\n")
    out = tmp / "report.json"
    cmd = [sys.executable, "-m", "pytest", str(tmp / "test_broken_file.py"), "-q", "-p", "no:cacheprovider"]
    cmd += ["-c", str(tmp / "pytest.ini"), "--rootdir", str(tmp), "--hicache-report", str(out)]
    cmd += ["-k", f"{ROUND_TRIP} or (FileWithV1 and test_matches_reference_model)"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data: dict[str, Any] = json.loads(out.read_text())
    data["_rc"] = proc.returncode
    return data


def _round_trips(report: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    return {
        nid.split("[", 1)[1].rstrip("]"): t
        for nid, t in report["tests"].items()
        if f"Test_{name}::{ROUND_TRIP}[" in nid
    }


def test_judged_with_sglangs_own_pools_and_controller(report: dict[str, Any]) -> None:
    sglang = report["sglang"]
    assert sglang["version"] == "0.5.23" and sglang["controller"] == "sglang", sglang
    assert sglang["host_pools"]["kv"] == "sglang", sglang["host_pools"]
    assert report["resources"]["peak_rss_bytes"]["runner"] < 2 * 2**30


def test_unbroken_hicachefile_passes(report: dict[str, Any]) -> None:
    got = _round_trips(report, "FileWithV1")
    assert {(t["io_path"], pid.split("-")[1]) for t, pid in zip(got.values(), got)} == {
        ("generic", "mha"),
        ("generic", "mla"),
        ("v1", "mha"),
        ("v1", "mla"),
    }, got
    assert {t["outcome"] for t in got.values()} == {"passed"}, got
    stateful = [
        t for nid, t in report["tests"].items() if "Test_FileWithV1::test_matches_reference_model" in nid
    ]
    assert [t["outcome"] for t in stateful] == ["passed"], stateful


@pytest.mark.parametrize("cls", BROKEN, ids=[c.__name__ for c in BROKEN])
def test_broken_hicachefile_fails_contract_on_both_paths_and_kinds(report: dict[str, Any], cls: type) -> None:
    got = _round_trips(report, cls.__name__)
    failed = {(t["io_path"], pid.split("-")[1]) for pid, t in got.items() if t["outcome"] == "failed"}
    assert failed == {(p, k) for p in cls.PATHS for k in ("mha", "mla")}, (cls.__name__, got)
    reasons = " ".join(t["reason"] for t in got.values())
    if cls.__name__ == "StoresNothingFile":
        assert "does not store the bytes it acknowledges" in reasons
    if cls.__name__ == "ShortReadFile":
        assert "a short read" in reasons


def test_mla_cases_run_by_default_and_catch_an_mla_only_fault(report: dict[str, Any]) -> None:
    """Declared nothing: the MLA cases ran (SGLang hands MLA models to every backend) and
    failed on both paths; the MHA cases passed."""
    got = _round_trips(report, MLAOnlyBrokenFile.__name__)
    by_kind = {(t["io_path"], pid.split("-")[1]): t["outcome"] for pid, t in got.items()}
    assert by_kind == {
        ("generic", "mha"): "passed",
        ("generic", "mla"): "failed",
        ("v1", "mha"): "passed",
        ("v1", "mla"): "failed",
    }, got
    caps = report["classes"]["Test_MLAOnlyBrokenFile"]["capabilities"]
    assert caps["declared"]["mla"] is True and "mla" in caps["inferred"] and not caps["not_certified"], caps


def test_taking_mla_away_passes_and_says_mla_was_not_certified(report: dict[str, Any]) -> None:
    got = _round_trips(report, "NoMLA")
    assert got and {pid.split("-")[1] for pid in got} == {"mha"}, got
    assert {t["outcome"] for t in got.values()} == {"passed"}, got
    caps = report["classes"]["Test_NoMLA"]["capabilities"]
    assert caps["declared"]["mla"] is False, caps
    assert caps["not_certified"]["mla"].startswith(
        "MLA was not certified: taken away with --capabilities -mla"
    )
