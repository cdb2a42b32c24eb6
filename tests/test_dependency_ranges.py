"""Every distribution declares version ranges; exact pins live only in ``constraints.txt``
(the dev and CI installs), so a user's resolver can pick versions that fit beside ours."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECTS = sorted(
    [
        ROOT / "pyproject.toml",
        *ROOT.glob("backends/*/pyproject.toml"),
        ROOT / "conformance" / "pyproject.toml",
    ]
)


def _requirements(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return reqs


def test_every_distribution_is_checked() -> None:
    assert len(PYPROJECTS) >= 6, PYPROJECTS


@pytest.mark.parametrize("pyproject", PYPROJECTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_dependencies_are_ranges_not_pins(pyproject: Path) -> None:
    pinned = [r for r in _requirements(pyproject) if re.search(r"(?<![<>!~])==|===", r)]
    assert not pinned, f"{pyproject.relative_to(ROOT)}: exact pins (move them to constraints.txt): {pinned}"
