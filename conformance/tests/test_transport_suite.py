"""``TransportTests`` on the shipped transports (memory, file) and on broken transports,
each of which must fail the test named for its fault (and the memory reference under it
must pass that same test)."""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import pytest
from hicache_conformance import BackendSuite, TransportTests
from hicache_conformance.broken.transports import BROKEN_TRANSPORTS
from hicache_conformance.raw_transport import TransportRawObjects

_ROOT = tempfile.mkdtemp(prefix="hicache-transport-conformance-")
atexit.register(shutil.rmtree, _ROOT, True)


class TestMemoryTransport(TransportTests):
    backend = "memory"


class TestFileTransport(TransportTests):
    backend = "file"
    config = {"root": _ROOT}


CLASS = """
class Test_{name}(TransportTests):
    backend = BROKEN_TRANSPORTS[{name!r}][0]
"""


@pytest.fixture(scope="module")
def broken_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("broken-transports")
    src = [
        "from hicache_conformance import BackendSuite, TransportTests",
        "from hicache_conformance.broken.transports import BROKEN_TRANSPORTS",
    ]
    src += [CLASS.format(name=n) for n in BROKEN_TRANSPORTS]
    (tmp / "test_bt.py").write_text("\n".join(src))
    (tmp / "pytest.ini").write_text("[pytest]\n")
    out = tmp / "report.json"
    cmd = [sys.executable, "-m", "pytest", str(tmp / "test_bt.py"), "-q", "-p", "no:cacheprovider"]
    cmd += ["-c", str(tmp / "pytest.ini"), "--rootdir", str(tmp), "--hicache-report", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", sorted(BROKEN_TRANSPORTS))
def test_broken_transport_fails_its_named_test_only(broken_report: dict[str, Any], name: str) -> None:
    fails = BROKEN_TRANSPORTS[name][1]
    outcomes: dict[str, set[str]] = {}
    for nid, t in broken_report["tests"].items():
        if f"Test_{name}::" in nid:
            outcomes.setdefault(nid.split("::")[-1].split("[")[0], set()).add(t["outcome"])
    assert outcomes.get(fails) == {"failed"}, (name, outcomes)


class TestRawAccessThroughTheTransport(BackendSuite):
    """The raw-object tests with out-of-band access through the backend's own transport
    (what any PagedStorage backend without a raw helper of its own gets)."""

    backend = "memory"
    matrix = "minimal"

    @pytest.fixture
    def raw_pages(self) -> TransportRawObjects:
        return TransportRawObjects()

    def capacity_config(self, capacity_bytes: int) -> dict[str, Any]:
        from hicache_conformance.faults import private_store_config

        return private_store_config(capacity_bytes)  # never bound the shared store


def test_short_read_transport_fails_the_out_of_band_half(tmp_path: Any) -> None:
    """Under a raw key scheme, a transport whose read copies a short object and returns
    True is caught by the half-written-page test's out-of-band half."""
    backend, _ = BROKEN_TRANSPORTS["ShortReadIsTrue"]
    src = [
        "import pytest",
        "from hicache_conformance import BackendSuite",
        "from hicache_conformance.broken.transports import BROKEN_TRANSPORTS",
        "from hicache_conformance.raw_transport import TransportRawObjects",
        "class TestShort(BackendSuite):",
        "    backend = BROKEN_TRANSPORTS['ShortReadIsTrue'][0]",
        "    config = {'key_scheme': 'sglang-file'}",
        "    @pytest.fixture",
        "    def raw_pages(self):",
        "        return TransportRawObjects()",
    ]
    (tmp_path / "test_short.py").write_text("\n".join(src))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    cmd = [sys.executable, "-m", "pytest", str(tmp_path / "test_short.py"), "-q", "-p", "no:cacheprovider"]
    cmd += ["-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-k", "half_written"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "an object cut short out of band was read as a hit" in proc.stdout
    assert backend.__name__


def test_a_namespace_that_already_holds_objects_is_refused(tmp_path: Any) -> None:
    """Pointed (by a wrong isolation setting) at a store that already holds objects, the
    suite refuses to touch it, with a clear message, and leaves the objects alone."""
    src = [
        "from hicache_conformance import BackendSuite",
        "from hicache_sdk.memory import MemoryTransport",
        "import ctypes",
        "_buf = ctypes.create_string_buffer(b'precious', 8)",
        "MemoryTransport(store='prod-like').write(['precious'], [[(ctypes.addressof(_buf), 8)]])",
        "class TestWrongIsolation(BackendSuite):",
        "    backend = 'memory'",
        "    config = {'key_scheme': 'sglang-file'}",
        "    def namespace_config(self, ns):",
        "        return {'store': 'prod-like'}  # wrong: every namespace shares one store",
        "def test_precious_is_still_there():",
        "    from hicache_sdk.memory import MemoryTransport",
        "    assert MemoryTransport(store='prod-like').exists(['precious']) == [8]",
    ]
    (tmp_path / "test_wrong.py").write_text("\n".join(src))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    cmd = [sys.executable, "-m", "pytest", str(tmp_path / "test_wrong.py"), "-q", "-p", "no:cacheprovider"]
    cmd += [
        "-c",
        str(tmp_path / "pytest.ini"),
        "--rootdir",
        str(tmp_path),
        "-k",
        "clear or garbage or precious",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert "refusing to run in namespace" in proc.stdout, proc.stdout[-2000:]
    assert "1 passed" in proc.stdout  # the planted object survived
