from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hicache_conformance.cli import EXIT_BACKEND_UNUSABLE, main

from hicache_sdk.memory import MemoryStorage


def test_check_memory_passes_and_writes_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    junit = tmp_path / "out.xml"
    config = json.dumps({"namespace_salt": "s3cr3t-salt"})
    rc = main(
        [
            "memory",
            "--config",
            config,
            "--report",
            str(report),
            "--junitxml",
            str(junit),
            "--matrix",
            "minimal",
            "-q",
        ]
    )
    assert rc == 0
    data = json.loads(report.read_text())
    for key in ("suite_version", "backend", "capabilities", "levels", "waivers", "config", "tests", "ok"):
        assert key in data
    assert data["ok"] is True
    assert data["backend"]["name"] == "memory"
    assert data["backend"]["distribution"] == "hicache-sdk"
    assert set(data["capabilities"]["declared"]) == set(data["capabilities"]["verified"])
    assert {"L0-shape", "L1-semantics", "L2-lifecycle", "L3-concurrency", "L4-faults", "stateful"} <= set(
        data["levels"]
    )
    assert all(c["failed"] == 0 for c in data["levels"].values())
    assert data["levels"]["L4-faults"]["passed"] == 3
    text = report.read_text()
    assert "s3cr3t" not in text
    assert data["config"]["namespace_salt"] == "***"
    assert junit.exists() and "testcase" in junit.read_text()


def test_check_level_filter_and_failure_exit(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    rc = main(
        [
            "hicache_conformance.broken.semantic:ExistsCountsNonConsecutive",
            "--level",
            "L1",
            "--matrix",
            "minimal",
            "--report",
            str(report),
            "-q",
            "-k",
            "leading_run",
        ]
    )
    assert rc == 1
    data = json.loads(report.read_text())
    assert set(data["levels"]) == {"L1-semantics"}
    assert data["levels"]["L1-semantics"]["failed"] == 1


def test_check_rejects_unknown_level() -> None:
    assert main(["memory", "--level", "L9"]) == 2


def test_check_unknown_backend_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    report = tmp_path / "r.json"
    rc = main(["no_such_module_xyz:Backend", "--report", str(report), "-q"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no module 'no_such_module_xyz'" in err[0] and "Available: " in err[0]
    data = json.loads(report.read_text())
    assert data["ok"] is False and data["error"].startswith("nothing ran: no module")
    assert data["tests"] == {}


def test_check_unimportable_backend_fails_fast(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "needs_a_library.py").write_text("import hicache_no_such_client_library\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    report = tmp_path / "r.json"
    rc = main(["needs_a_library:Backend", "--report", str(report), "-q"])
    assert rc == EXIT_BACKEND_UNUSABLE == 6
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hicache_no_such_client_library" in err[0] and "cannot import" in err[0]
    data = json.loads(report.read_text())
    assert data["ok"] is False and data["error"].startswith("nothing ran: cannot import")


def test_check_config_typo_fails_fast_naming_the_key(capsys: Any) -> None:
    rc = main(["memory", "--config", '{"stor": "x"}', "-q"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stor" in err[0] and "config rejected" in err[0]


def test_check_runs_transport_tests_for_paged_backends_and_names_failed_rules(
    tmp_path: Path, capsys: Any
) -> None:
    report = tmp_path / "r.json"
    rc = main(["memory", "--level", "L1", "--matrix", "minimal", "-k", "transport", "--report", str(report)])
    assert rc == 0
    data = json.loads(report.read_text())
    names = {nid.split("::")[-1].split("[")[0] for nid in data["tests"]}
    assert "test_transport_wrong_size_object_is_never_read" in names
    assert data["profile"] == "strict" and data["capabilities"]["inferred"] == []
    assert "memory: PASS (profile strict)" in capsys.readouterr().out


def test_check_isolates_sglang_scheme_namespaces_from_the_command_line(tmp_path: Path) -> None:
    config = json.dumps({"key_scheme": "sglang-file"})
    base = ["file", "--config", config, "--level", "L1", "--matrix", "minimal", "-k", "byte_exact", "-q"]
    report = tmp_path / "r.json"
    rc = main([*base, "--isolate", f"root={tmp_path}/{{namespace}}", "--report", str(report)])
    assert rc == 0
    data = json.loads(report.read_text())
    assert data["ok"] is True and any(t["outcome"] == "passed" for t in data["tests"].values())
    assert any(p.name.startswith("hicache-conformance-") for p in tmp_path.iterdir())
    assert main([*base, "--report", str(report)]) == 2  # no isolation: nothing runs
    assert "--isolate" in json.loads(report.read_text())["error"]


class _NeedsAnArgument(MemoryStorage):
    """A backend class whose constructor cannot work the way SGLang's loader calls it."""

    def __init__(self, storage_config: Any, config: Any, port: int) -> None:
        raise AssertionError("never reached")


def test_check_unconstructible_backend_fails_fast(capsys: Any) -> None:
    rc = main([f"{__name__}:_NeedsAnArgument", "-q"])
    assert rc == 6
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot construct the backend: TypeError" in err[0] and "port" in err[0]


def test_check_declares_capabilities_from_the_command_line(tmp_path: Path, capsys: Any) -> None:
    """A backend written straight against SGLang's ABC cannot show ``mla``: declared on the
    command line, its MLA cases run, and the report shows declared vs inferred."""
    report = tmp_path / "r.json"
    rc = main(
        [
            "hicache_conformance.broken.filelike:FilePages",
            "--config",
            json.dumps({"root": str(tmp_path / "files")}),
            "--capabilities",
            "mla,persistent",
            "--level",
            "L1",
            "--matrix",
            "minimal",
            "-k",
            "byte_exact",
            "--report",
            str(report),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    data = json.loads(report.read_text())
    caps = data["capabilities"]
    assert caps["inferred"] == ["zero_copy", "delete"]
    assert caps["from_command_line"] == ["mla", "persistent"]
    assert caps["sources"] == {
        "delete": "inferred",
        "mla": "command line",
        "persistent": "command line",
        "zero_copy": "inferred",
    }
    assert caps["declared"]["mla"] is True and caps["verified"]["mla"] == "verified"
    ran = [nid for nid in data["tests"] if "test_get_after_set_is_byte_exact" in nid]
    assert any("-mla-" in nid for nid in ran) and {data["tests"][n]["io_path"] for n in ran} == {
        "generic",
        "v1",
    }
    assert data["route"]["io_paths"] == ["generic", "v1"]
    assert "declared on the command line: mla, persistent" in out
    assert "PytestAssertRewriteWarning" not in out


def test_check_rejects_an_unknown_capability(capsys: Any) -> None:
    assert main(["memory", "--capabilities", "mla,teleport"]) == 2
    assert "teleport" in capsys.readouterr().err


def test_check_follows_the_route_sglang_takes(tmp_path: Path) -> None:
    """As a built-in zero-copy backend (``--sglang-backend mooncake``), only the v1 path is
    certified and only page-first layouts (SGLang's rewrite of layer_first)."""
    report = tmp_path / "r.json"
    rc = main(
        [
            "memory",
            "--sglang-backend",
            "mooncake",
            "--level",
            "L1",
            "-k",
            "byte_exact",
            "-q",
            "--report",
            str(report),
        ]
    )
    assert rc == 0
    data = json.loads(report.read_text())
    assert data["route"] == {
        "storage_backend": "mooncake",
        "io_backend": "kernel",
        "io_paths": ["v1"],
        "layouts": ["page_first", "page_first_direct"],
    }
    ran = [nid for nid in data["tests"] if "test_get_after_set_is_byte_exact" in nid]
    assert ran and all("layer_first" not in nid and "[v1-" in nid for nid in ran)
    assert set(data["io_paths"]) == {"v1"}
