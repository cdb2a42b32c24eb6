"""Both certification routes on the same backends: a three-line ``BackendSuite`` test file
and ``hicache check module:Class``, each writing its JSON report, all in one subprocess.
``test_routes.py`` compares them.

The backends: the ``dirstore`` example of ``docs/writing-a-backend.md``, its in-place
variant (``dirstore_inplace.py``) and every broken transport of
``hicache_conformance.broken.transports``. Both routes use the minimal host-pool matrix
(a class attribute on one, ``--matrix minimal`` on the other). Every test id both collect
is compared; the tests of :data:`SUBSET` are run on both and their outcomes compared (the
whole suite on ten backends twice would take minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "docs" / "examples"
TRANSPORTS = "hicache_conformance.broken.transports"

#: label -> (module:Class, needs a directory of its own)
BACKENDS: dict[str, tuple[str, bool]] = {
    "dirstore": ("dirstore_backend:DirStorage", True),
    "dirstore_in_place": ("dirstore_inplace:InPlaceDirStorage", True),
}


def _broken() -> dict[str, tuple[str, bool]]:
    from hicache_conformance.broken.transports import BROKEN_TRANSPORTS

    return {n: (f"{TRANSPORTS}:{cls.__name__}", False) for n, (cls, _) in sorted(BROKEN_TRANSPORTS.items())}


_CLASS = """
class Test_{label}(BackendSuite):
    backend, config = {target!r}, {config!r}
    matrix = "minimal"
"""

#: The tests both routes run on every backend (``-k``): the transport tests and the
#: round trips above them. Every collected test id is compared, run or not.
SUBSET = "transport or byte_exact"

#: Runs in ONE subprocess (interpreter, torch and hypothesis paid once): collects both
#: routes' test ids, runs the test file's classes, then ``hicache check`` (its
#: ``main``, in process) on each backend; writes what it saw to ``out.json``.
_DRIVER = """
import json, sys
import pytest
from pathlib import Path
from hicache_conformance.cli import main as check

spec = json.loads(Path(sys.argv[1]).read_text())
tmp = spec["tmp"]
base = ["-q", "-p", "no:cacheprovider", "-c", tmp + "/pytest.ini", "--rootdir", tmp]
suite = str(Path(__import__("hicache_conformance").__file__).with_name("suite") / "test_configured.py")


class Ids:
    def __init__(self):
        self.ids = []

    def pytest_collection_finish(self, session):
        self.ids = [i.nodeid for i in session.items]


def collect(args):
    sys.modules.pop("hicache_conformance.suite.test_configured", None)
    c = Ids()
    pytest.main([*args, *base, "--collect-only"], plugins=[c])
    sys.modules.pop("hicache_conformance.suite.test_configured", None)
    return c.ids


out = {"file_ids": collect([spec["file"]]), "check_ids": {}, "check_rc": {}}
out["file_rc"] = int(pytest.main([spec["file"], *base, "-k", spec["k"], "--hicache-report", tmp + "/file.json"]))
for label, target, config in spec["backends"]:
    cfg = json.dumps(config)
    out["check_ids"][label] = collect(
        [suite, "--hicache-backend", target, "--hicache-config", cfg, "--hicache-matrix", "minimal"]
    )
    report = f"{tmp}/check-{label}.json"
    args = [target, "--config", cfg, "--matrix", "minimal", "-k", spec["k"], "-q", "--report", report]
    out["check_rc"][label] = int(check(args))
# a backend without delete: the suite cannot clean up after itself, and says so
args = ["memory", "--capabilities", "-delete", "--matrix", "minimal", "-k", "byte_exact", "-q"]
out["no_delete_rc"] = int(check([*args, "--report", tmp + "/no-delete.json"]))
Path(tmp, "out.json").write_text(json.dumps(out))
"""


@dataclass
class Routes:
    """Per backend label: every test id each route collects (without the class), the
    test file's report entries (test id without the class -> entry), and the ``hicache
    check`` exit status and JSON report, over :data:`SUBSET`."""

    file_ids: dict[str, list[str]]
    check_ids: dict[str, list[str]]
    file_report: dict[str, Any]
    file_tests: dict[str, dict[str, dict[str, Any]]]
    check_rc: dict[str, int]
    check_reports: dict[str, dict[str, Any]]
    output: str
    #: ``hicache check memory --capabilities -delete``'s report.
    no_delete: dict[str, Any]


def strip_class(nodeid: str) -> str:
    """``path::TestClass::test_x[params]`` -> ``test_x[params]``."""
    return nodeid.rsplit("::", 1)[-1]


def _label(nodeid: str) -> str:
    return nodeid.split("::")[-2].removeprefix("Test_")


def run_routes(tmp: Path) -> Routes:
    backends = {**BACKENDS, **_broken()}
    spec_backends = []
    src = ["from hicache_conformance import BackendSuite"]
    for label, (target, needs_dir) in backends.items():
        file_cfg = {"root": str(tmp / "file-route" / label)} if needs_dir else {}
        check_cfg = {"root": str(tmp / "check-route" / label)} if needs_dir else {}
        src.append(_CLASS.format(label=label, target=target, config=file_cfg))
        spec_backends.append((label, target, check_cfg))
    (tmp / "test_three_lines.py").write_text("\n".join(src))
    (tmp / "pytest.ini").write_text("[pytest]\n")
    (tmp / "driver.py").write_text(_DRIVER)
    spec = {"tmp": str(tmp), "file": str(tmp / "test_three_lines.py"), "k": SUBSET, "backends": spec_backends}
    (tmp / "spec.json").write_text(json.dumps(spec))
    path = [str(HERE), str(EXAMPLES), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    proc = subprocess.run(
        [sys.executable, str(tmp / "driver.py"), str(tmp / "spec.json")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp,
    )
    output = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert (tmp / "out.json").exists(), output
    out = json.loads((tmp / "out.json").read_text())
    file_report = json.loads((tmp / "file.json").read_text())
    file_ids: dict[str, list[str]] = {label: [] for label in backends}
    for nid in out["file_ids"]:
        file_ids[_label(nid)].append(strip_class(nid))
    file_tests: dict[str, dict[str, dict[str, Any]]] = {label: {} for label in backends}
    for nid, t in file_report["tests"].items():
        file_tests[_label(nid)][strip_class(nid)] = t
    check_reports = {label: json.loads((tmp / f"check-{label}.json").read_text()) for label in backends}
    return Routes(
        file_ids,
        {label: [strip_class(n) for n in ids] for label, ids in out["check_ids"].items()},
        file_report,
        file_tests,
        {label: int(rc) for label, rc in out["check_rc"].items()},
        check_reports,
        output,
        json.loads((tmp / "no-delete.json").read_text()),
    )
