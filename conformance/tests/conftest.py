"""The suite's own tests share one pytest subprocess for every suite run they inspect
(see ``suite_runs.py``), and one for both certification routes (``route_runs.py``): each
runs once per test run, whatever the number of pytest-xdist workers (:func:`once_per_run`)."""

from __future__ import annotations

import fcntl
import os
import pickle
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from route_runs import Routes, run_routes
from suite_runs import Run, run_all

T = TypeVar("T")


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[Path], T]) -> T:
    """``compute(a new temp dir)`` once per test run: the first worker to ask computes it
    under a lock and leaves the result (pickled) in the run's shared temp dir; the others
    wait for the lock and read it (pytest-xdist's workers share the parent of their temp dirs)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    result = shared / f"{name}.pickle"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if result.exists():
            value: T = pickle.loads(result.read_bytes())
            return value
        value = compute(tmp_path_factory.mktemp(name))
        result.write_bytes(pickle.dumps(value))
        return value


#: fixture name -> (result name, what computes it)
_SHARED: dict[str, tuple[str, Callable[[Path], object]]] = {
    "suite_run": ("suite-runs", run_all),
    "routes": ("routes", run_routes),
}


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the shared runs the selected tests need in the background, as soon as the tests
    are collected: the subprocesses run while this worker runs other tests (the first
    worker to take a run's lock computes it; the others' threads wait and read it)."""
    needed = {name for item in session.items for name in getattr(item, "fixturenames", ()) if name in _SHARED}
    factory = session.config._tmp_path_factory  # type: ignore[attr-defined]
    factory.getbasetemp()  # made here: pytest's first call creates it, and is not thread-safe
    for fixture in sorted(needed):
        name, compute = _SHARED[fixture]
        threading.Thread(
            target=once_per_run, args=(factory, name, compute), daemon=True, name=f"shared-{name}"
        ).start()


@pytest.fixture(scope="session")
def suite_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return once_per_run(tmp_path_factory, *_SHARED["suite_run"])


@pytest.fixture(scope="session")
def routes(tmp_path_factory: pytest.TempPathFactory) -> Routes:
    return once_per_run(tmp_path_factory, *_SHARED["routes"])
