"""The linker contract (``hicache_conformance.linker_contract``) inside the real SGLang
0.5.23 (collected only in ``tox -e sglang``): ``TransportLinker`` passes every check on the
file backend, and each broken linker of ``hicache_conformance.broken.linkers`` fails the
check named for its fault, with its reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hicache_conformance.broken.linkers import BROKEN_LINKERS
from hicache_conformance.linker_contract import CHECKS, LinkerEnv, linker_env


@pytest.fixture
def env(tmp_path: Path) -> Iterator[LinkerEnv]:
    e = linker_env(
        "hicache_sdk.sglang.linker:TransportLinker",
        {"backend": "file", "backend_config": {"root": str(tmp_path)}},
    )
    yield e
    e.close()


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_transport_linker_passes(env: LinkerEnv, check: str) -> None:
    CHECKS[check](env)


@pytest.mark.parametrize("name", sorted(BROKEN_LINKERS))
def test_broken_linker_fails_its_check(name: str, tmp_path: Path) -> None:
    _, check, reason = BROKEN_LINKERS[name]
    e = linker_env(
        f"hicache_conformance.broken.linkers:{name}",
        {"backend": "file", "backend_config": {"root": str(tmp_path)}},
    )
    try:
        with pytest.raises(AssertionError, match=reason):
            CHECKS[check](e)
    finally:
        e.close()
