"""Versions and pins. Every distribution declares version ranges, so a user's resolver can
pick versions that fit beside ours; the exact versions of the dev and CI installs live only
in ``constraints.txt``, which every install step uses. Our distributions share one version,
and each declares the ``hicache-sdk`` range it needs (the 0.2 API, nothing older)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

import hicache_sdk

ROOT = Path(__file__).resolve().parent.parent
PYPROJECTS = sorted(
    [
        ROOT / "pyproject.toml",
        *ROOT.glob("backends/*/pyproject.toml"),
        ROOT / "conformance" / "pyproject.toml",
    ]
)
CONSTRAINTS = ROOT / "constraints.txt"
#: The files that install packages for dev and CI: they name packages, constraints.txt pins them.
INSTALLERS = sorted(
    [
        ROOT / "requirements-dev.txt",
        ROOT / "tests" / "sglang" / "requirements.txt",
        ROOT / "scripts" / "compat" / "requirements.txt",
        ROOT / "tox.ini",
        *ROOT.glob("scripts/*.sh"),
        ROOT / ".ci" / "run",
    ]
)
#: Requirement files whose every package must have its version in constraints.txt.
PINNED_BY_CONSTRAINTS = [ROOT / "requirements-dev.txt", ROOT / "tests" / "sglang" / "requirements.txt"]
_PIN = re.compile(r"(?<![<>!~=])===?\s*v?\d")


def _project(pyproject: Path) -> dict:
    return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]


def _requirements(pyproject: Path) -> list[str]:
    project = _project(pyproject)
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return reqs


def _constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        assert m, f"constraints.txt: not 'name==version': {line!r}"
        name = _canonical(m.group(1))
        assert name not in pins, f"constraints.txt: {name} pinned twice"
        pins[name] = m.group(2)
    return pins


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(path: Path) -> list[str]:
    names = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.append(_canonical(Requirement(line).name))
    return names


def test_every_distribution_is_checked() -> None:
    assert len(PYPROJECTS) >= 6, PYPROJECTS


@pytest.mark.parametrize("pyproject", PYPROJECTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_dependencies_are_ranges_not_pins(pyproject: Path) -> None:
    pinned = [r for r in _requirements(pyproject) if _PIN.search(r)]
    assert not pinned, f"{pyproject.relative_to(ROOT)}: exact pins (move them to constraints.txt): {pinned}"


@pytest.mark.parametrize("path", INSTALLERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_install_steps_name_packages_constraints_pin_them(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    pinned = [line.strip() for line in code.splitlines() if _PIN.search(line)]
    assert not pinned, f"{path.relative_to(ROOT)}: exact versions (they belong in constraints.txt): {pinned}"


@pytest.mark.parametrize("path", PINNED_BY_CONSTRAINTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_required_tools_have_their_version_in_constraints(path: Path) -> None:
    pins = _constraints()
    missing = [n for n in _requirement_names(path) if n not in pins]
    assert not missing, f"{path.relative_to(ROOT)}: no version in constraints.txt for {missing}"


def test_constraints_pin_torch_to_one_version() -> None:
    pins = _constraints()
    assert Version(pins["torch"]) >= Version("2.1"), pins["torch"]
    assert {"numpy", "pytest", "ruff", "mypy", "vulture", "import-linter"} <= set(pins)


def test_the_pin_pattern_tells_pins_from_ranges() -> None:
    pins = ["torch==2.13.0", "moto[server]==5.2.5", "x===1", 'pip install "boto3==1.44.8"']
    ranges = ["torch>=2.1", "redis>=5,<9", "a~=1.0", "b!=2", "c<=3", 'if [ "$a" == "$b" ]', "x == y"]
    assert all(_PIN.search(p) for p in pins)
    assert not any(_PIN.search(r) for r in ranges)


def test_every_distribution_has_the_core_version() -> None:
    versions = {str(p.relative_to(ROOT)): _project(p)["version"] for p in PYPROJECTS}
    assert set(versions.values()) == {hicache_sdk.__version__}, versions
    assert Version(hicache_sdk.__version__) >= Version("0.2.0")


def test_the_suite_reports_its_own_version() -> None:
    from hicache_conformance import __version__

    assert __version__ == _project(ROOT / "conformance" / "pyproject.toml")["version"]


@pytest.mark.parametrize(
    "pyproject",
    [p for p in PYPROJECTS if p != ROOT / "pyproject.toml"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_sdk_range_is_the_api_it_uses(pyproject: Path) -> None:
    """The suite and the backends import modules that 0.2 moved or added
    (``hicache_sdk.memory``, ``hicache_sdk.config.values``, ``hicache_sdk.sglang.versions``):
    their range admits this release, none before 0.2, and no next minor release (whose
    internals may move)."""
    (sdk,) = [Requirement(r) for r in _requirements(pyproject) if Requirement(r).name == "hicache-sdk"]
    current = Version(hicache_sdk.__version__)
    assert current in sdk.specifier, (str(sdk), current)
    assert Version("0.1.0") not in sdk.specifier, str(sdk)
    assert Version(f"{current.major}.{current.minor + 1}.0") not in sdk.specifier, str(sdk)
