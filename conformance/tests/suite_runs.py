"""Every suite run the suite's own tests inspect, in ONE pytest subprocess (the session
fixture ``suite_run`` of ``conftest.py``): interpreter start-up, torch and hypothesis are
paid once. Each part is test-class source plus a ``-k`` selector; the tests read the
JSON report, the JUnit XML and the output.

Parts:

* ``broken``: the semantic, I/O, v2 and ``HiCacheFile``-like broken backends and their
  correct baselines, per profile (``test_broken_backends.py``);
* ``transports``: the broken transports, a short-reading transport under a raw key scheme,
  and a wrong isolation setting pointed at a store that holds an object
  (``test_transport_suite.py``);
* ``reporting``: a backend with a programming error, a failure hypothesis cannot replay,
  and a backend that stores nothing counted for footprint (``test_reporting.py``; last,
  so its final check sees every backend of the run released).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

BROKEN = [
    "hicache_conformance.broken.semantic:ExistsCountsNonConsecutive",
    "hicache_conformance.broken.semantic:GetReturnsOtherPage",
    "hicache_conformance.broken.semantic:SetRewritesExisting",
    "hicache_conformance.broken.semantic:MissingPageRaises",
    "hicache_conformance.broken.semantic:SidecarRunIgnored",
    "hicache_conformance.broken.semantic:WriteVisibleBeforeItsBytes",
    "hicache_conformance.broken.io:HalfWrittenPageVisible",
    "hicache_conformance.broken.io:HangsWhileDown",
    "hicache_conformance.broken.io:ReadLandsAfterDeadline",
]
FILELIKE = [
    "hicache_conformance.broken.filelike:ShortReadFilePages",
    "hicache_conformance.broken.filelike:TruncatedLastPageFilePages",
    "hicache_conformance.broken.filelike:StoresNothingFilePages",
    "hicache_conformance.broken.filelike:ShortReadGenericOnlyFilePages",
]
REFERENCE = "hicache_conformance.broken.reference:ReferenceStorage"
FILE_REFERENCE = "hicache_conformance.broken.filelike:FilePages"
PROFILES = ("contract", "strict")
STATEFUL = "test_matches_reference_model"
#: Faults the stateful comparison with the memory reference must catch as well, by profile.
ALSO_FAILS = {
    "SetRewritesExisting": ("strict",),  # contract: a rewrite may store other bytes
    "GetReturnsOtherPage": ("contract", "strict"),
    "StoresNothingFilePages": ("contract",),
}

_BROKEN_CLASS = """
from {module} import {cls} as _B_{cls}


class Test_{cls}_{profile}(BackendSuite):
    backend = _B_{cls}
    profile = "{profile}"
    matrix = "minimal"
    call_deadline_s = 2.0
    stateful_shrink = False
    config = {config}
    extra_capabilities = {caps}

    @pytest.fixture
    def fault_hooks(self):
        from hicache_conformance.broken.io import hooks_for
        return hooks_for(_B_{cls})
"""

_TRANSPORTS = """
from hicache_conformance import TransportTests
from hicache_conformance.broken.transports import BROKEN_TRANSPORTS
from hicache_conformance.raw_transport import TransportRawObjects
from hicache_sdk.memory import MemoryTransport
import ctypes

{classes}


class TestShortReadUnderRawScheme(BackendSuite):
    backend = BROKEN_TRANSPORTS["ShortReadIsTrue"][0]
    config = {{"key_scheme": "sglang-file"}}

    @pytest.fixture
    def raw_pages(self):
        return TransportRawObjects()


_buf = ctypes.create_string_buffer(b"precious", 8)
MemoryTransport(store="prod-like").write(["precious"], [[(ctypes.addressof(_buf), 8)]])


class TestWrongIsolation(BackendSuite):
    backend = "memory"
    config = {{"key_scheme": "sglang-file"}}

    def namespace_config(self, ns):
        return {{"store": "prod-like"}}  # wrong: every namespace shares one store


def test_precious_is_still_there():
    assert MemoryTransport(store="prod-like").exists(["precious"]) == [8]
"""

_REPORTING = """
import gc
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


def cls_of(target: str) -> Any:
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def fails(target: str) -> str:
    return str(cls_of(target).FAILS)


def profiles_of(target: str) -> tuple[str, ...]:
    return tuple(getattr(cls_of(target), "PROFILES", PROFILES))


def _broken_part(root: Path) -> tuple[list[str], list[str]]:
    entries: list[tuple[str, list[str], dict[str, str], tuple[str, ...]]] = []
    for t in BROKEN:
        extra = [STATEFUL] if t.split(":")[1] in ALSO_FAILS else []
        entries.append((t, [fails(t), *extra], {}, PROFILES))
    entries.append((REFERENCE, [fails(t) for t in BROKEN] + [STATEFUL], {}, PROFILES))
    for t in FILELIKE:
        extra = [STATEFUL] if t.split(":")[1] in ALSO_FAILS else []
        entries.append((t, [fails(t), *extra], {"root": str(root)}, ("contract",)))
    entries.append((FILE_REFERENCE, [fails(FILELIKE[0]), STATEFUL], {"root": str(root)}, ("contract",)))
    src, selectors = [], []
    for target, names, config, profiles in entries:
        module, cls = target.split(":")
        caps = ("mla",) if "filelike" in module else ()
        src += [
            _BROKEN_CLASS.format(module=module, cls=cls, profile=p, config=repr(config), caps=repr(caps))
            for p in profiles
        ]
        selectors.append(f"(Test_{cls}_ and ({' or '.join(dict.fromkeys(names))}))")
    return src, selectors


def _transport_part() -> tuple[list[str], list[str]]:
    from hicache_conformance.broken.transports import BROKEN_TRANSPORTS

    classes = "\n".join(
        f"class Test_{n}(TransportTests):\n    backend = BROKEN_TRANSPORTS[{n!r}][0]\n"
        for n in BROKEN_TRANSPORTS
    )
    selectors = [f"Test_{n}" for n in BROKEN_TRANSPORTS]
    selectors += [
        "(TestShortReadUnderRawScheme and half_written)",
        "(TestWrongIsolation and clear)",
    ]
    selectors += ["precious"]
    return [_TRANSPORTS.format(classes=classes)], selectors


def _reporting_part(root: Path) -> tuple[list[str], list[str]]:
    selectors = [
        "TestCounted",
        "zz_every_backend",
        "(TestBuggy and byte_exact)",
        f"(TestFlaky and {STATEFUL})",
    ]
    return [_REPORTING.format(root=str(root))], selectors


@dataclass
class Run:
    report: dict[str, Any]
    junit: str
    out: str
    rc: int

    def tests(self, cls: str, name: str) -> dict[str, dict[str, Any]]:
        """Parameter id (``""`` when none) -> report entry, for one class and test name."""
        out = {}
        for nid, t in self.report["tests"].items():
            parts = nid.split("::")
            if len(parts) < 3 or parts[-2] != cls:
                continue
            base, _, param = parts[-1].partition("[")
            if base == name:
                out[param.rstrip("]")] = t
        return out

    def passed_functions(self) -> set[str]:
        """Plain test functions (not suite tests) that passed (from ``-rA``)."""
        return {ln.split("::")[-1].strip() for ln in self.out.splitlines() if ln.startswith("PASSED ")}


def run_all(tmp: Path) -> Run:
    src = ["import pytest", "from hicache_conformance import BackendSuite"]
    selectors: list[str] = []
    for part_src, part_sel in (
        _broken_part(tmp / "files"),
        _transport_part(),
        _reporting_part(tmp / "counted"),
    ):
        src += part_src
        selectors += part_sel
    (tmp / "test_suite_runs.py").write_text("\n".join(src))
    (tmp / "pytest.ini").write_text("[pytest]\n")
    report, junit = tmp / "report.json", tmp / "junit.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(tmp / "test_suite_runs.py"),
        "-q",
        "-rA",
        "-p",
        "no:cacheprovider",
    ]
    cmd += ["-c", str(tmp / "pytest.ini"), "--rootdir", str(tmp), "--hicache-report", str(report)]
    cmd += ["--junitxml", str(junit), "-k", " or ".join(selectors)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return Run(
        json.loads(report.read_text()),
        junit.read_text() if junit.exists() else "",
        proc.stdout,
        proc.returncode,
    )
