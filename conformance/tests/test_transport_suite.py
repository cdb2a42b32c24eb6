"""``TransportTests`` on the shipped transports (memory, file) and on broken transports,
each of which must fail the test named for its fault (and the memory reference under it
must pass that same test)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from typing import Any

import pytest
from hicache_conformance import BackendSuite, TransportTests
from hicache_conformance.broken.transports import BROKEN_TRANSPORTS
from hicache_conformance.raw_transport import TransportRawObjects
from suite_runs import Run

_ROOT = tempfile.mkdtemp(prefix="hicache-transport-conformance-")
atexit.register(shutil.rmtree, _ROOT, True)


class TestMemoryTransport(TransportTests):
    backend = "memory"


class TestFileTransport(TransportTests):
    backend = "file"
    config = {"root": _ROOT}


@pytest.mark.parametrize("name", sorted(BROKEN_TRANSPORTS))
def test_broken_transport_fails_its_named_test_only(suite_run: Run, name: str) -> None:
    """Each broken transport fails the test named for its fault (the runs:
    ``suite_runs.py``, part ``transports``)."""
    fails = BROKEN_TRANSPORTS[name][1]
    outcomes: dict[str, set[str]] = {}
    for nid, t in suite_run.report["tests"].items():
        if f"::Test_{name}::" in nid:
            outcomes.setdefault(nid.split("::")[-1].split("[")[0], set()).add(t["outcome"])
    assert outcomes.get(fails) == {"failed"}, (name, outcomes)


def test_reads_that_come_back_short_are_called_short_reads(suite_run: Run) -> None:
    """A transport whose every read fills only half the buffer is reported as reading
    short, in every test it fails: never blamed for replacing or deleting objects."""
    reasons = [
        t["reason"]
        for nid, t in suite_run.report["tests"].items()
        if "::Test_ReadsComeBackShort::" in nid and t["outcome"] == "failed"
    ]
    assert len(reasons) >= 4, reasons
    for r in reasons:
        assert "a short read, only the first" in r and "bytes arrived" in r, r[:600]
        assert "replaced" not in r and "removed another object" not in r, r[:600]


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


def test_short_read_transport_fails_the_out_of_band_half(suite_run: Run) -> None:
    """Under a raw key scheme, a transport whose read copies a short object and returns
    True is caught by the half-written-page test's out-of-band half."""
    (t,) = suite_run.tests("TestShortReadUnderRawScheme", "test_half_written_page_never_a_hit").values()
    assert t["outcome"] == "failed" and "an object cut short out of band was read as a hit" in t["reason"], t


def test_a_namespace_that_already_holds_objects_is_refused(suite_run: Run) -> None:
    """Pointed (by a wrong isolation setting) at a store that already holds objects, the
    suite refuses to touch it, with a clear message, and leaves the objects alone."""
    got = {**suite_run.tests("TestWrongIsolation", "test_clear_is_scoped_to_the_namespace")}
    got.update(suite_run.tests("TestWrongIsolation", "test_clear_is_scoped_to_the_model"))
    assert got and all(t["outcome"] == "failed" for t in got.values()), got
    assert any("refusing to run in namespace" in t["reason"] for t in got.values()), got
    assert "test_precious_is_still_there" in suite_run.passed_functions()  # the object survived
