"""Fixtures of the registry tests: a clean registry per test, a real fixture distribution
installed with pip into a temporary directory, and a factory of ``.dist-info`` folders."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hicache_sdk import registry

FIXTURE_SRC = Path(__file__).parent / "fixtures" / "hicache_fake_backend"
FAKE_MODULES = ("hicache_fake_backend", "hicache_fake_missing_dependency")


def _forget_fake_modules() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in FAKE_MODULES or name.startswith("hicache_test_"):
            del sys.modules[name]


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No allow-list, no runtime registrations, fresh entry-point cache, before and after."""
    monkeypatch.delenv(registry.ALLOW_LIST_ENV, raising=False)
    saved = dict(registry._runtime)
    registry._runtime.clear()
    registry.refresh()
    yield
    registry._runtime.clear()
    registry._runtime.update(saved)
    registry.refresh()
    _forget_fake_modules()


@pytest.fixture(scope="session")
def fake_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture distribution, pip-installed (no deps, no index) into a temp folder."""
    root = tmp_path_factory.mktemp("fake_dist")
    src = root / "src"
    shutil.copytree(FIXTURE_SRC, src)  # build outside the repo: no build/ or egg-info there
    site = root / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
            str(site),
            str(src),
        ],
        capture_output=True,
        timeout=120,
    )
    if proc.returncode != 0:  # no setuptools in this environment: lay the install out by hand
        _install_by_hand(src, site)
    return site


def _install_by_hand(src: Path, site: Path) -> None:
    """What ``pip install --target`` produces for the fixture: the package and a
    ``.dist-info`` with METADATA and entry_points.txt read from its pyproject."""
    import tomllib

    project = tomllib.loads((src / "pyproject.toml").read_text())["project"]
    shutil.copytree(src / "hicache_fake_backend", site / "hicache_fake_backend", dirs_exist_ok=True)
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    meta = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    meta += [f"Requires-Dist: {r}" for r in project.get("dependencies", [])]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    lines = []
    for group, entries in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def with_fake_site(fake_site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``fake_site`` on ``sys.path`` for this test (and the registry cache refreshed)."""
    monkeypatch.syspath_prepend(str(fake_site))
    registry.refresh()
    return fake_site


MakeDist = Callable[..., Path]


@pytest.fixture
def make_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MakeDist:
    """Write ``<name>-<version>.dist-info`` (METADATA + entry_points.txt) into a new folder
    on ``sys.path``, the layout ``importlib.metadata`` reads, and return that folder."""
    counter = [0]

    def make(
        name: str,
        version: str,
        entry_points: dict[str, str],
        *,
        requires: tuple[str, ...] = (),
        modules: dict[str, str] | None = None,
    ) -> Path:
        counter[0] += 1
        folder = tmp_path / f"site{counter[0]}"
        info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        meta += [f"Requires-Dist: {r}" for r in requires]
        (info / "METADATA").write_text("\n".join(meta) + "\n")
        lines = ["[hicache_sdk.backends]"] + [f"{k} = {v}" for k, v in entry_points.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        for rel, text in (modules or {}).items():
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        monkeypatch.syspath_prepend(str(folder))
        registry.refresh()
        return folder

    return make
