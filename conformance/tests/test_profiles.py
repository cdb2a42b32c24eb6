"""Profiles and inferred capabilities: a plain v1-only backend (no declaration, no v2,
keys per model and rank) passes ``contract`` and fails ``strict`` on the strict-only
geometry rule, with that rule's reason in the failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hicache_conformance import BackendSuite
from hicache_conformance.capabilities import default_profile, infer_capabilities
from hicache_conformance.cli import main
from plain_backend import PlainV1Backend

from hicache_sdk import Capabilities, PagedStorage


class TestPlainV1BackendContract(BackendSuite):
    backend = PlainV1Backend
    profile = "contract"
    matrix = "minimal"
    stateful_examples = 10


def test_inferred_capabilities_are_what_the_class_implements() -> None:
    caps, inferred = infer_capabilities(PlainV1Backend)
    assert inferred == ("zero_copy", "delete")
    on = {n for n, v in caps.to_dict().items() if v}
    assert on == {"zero_copy", "delete"}

    class NoV1(PlainV1Backend):
        batch_get_v1 = PlainV1Backend.__mro__[1].batch_get_v1  # back to the contract's default

    assert infer_capabilities(NoV1)[0].zero_copy is False


def test_declared_capabilities_stay_authoritative() -> None:
    class Declared(PlainV1Backend):
        capabilities = Capabilities(**{n: n == "mla" for n in Capabilities.names()})

    caps, inferred = infer_capabilities(Declared)
    assert inferred == () and caps.mla is True and caps.zero_copy is False


def test_default_profile_follows_what_the_backend_is() -> None:
    assert default_profile(PlainV1Backend) == "contract"
    assert default_profile(PagedStorage) == "strict"


def _check(profile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    """``hicache check`` in this process (``plain_backend`` is importable from here)."""
    report = tmp_path / f"{profile}.json"
    args = ["plain_backend:PlainV1Backend", "--profile", profile, "--level", "L1", "--matrix", "minimal"]
    rc = main([*args, "-q", "--report", str(report)])
    return rc, json.loads(report.read_text()), capsys.readouterr().out


def test_contract_passes_strict_fails_with_the_rules_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, rep, _ = _check("contract", tmp_path, capsys)
    assert rc == 0 and rep["ok"] is True and rep["profile"] == "contract"
    assert rep["capabilities"]["inferred"] == ["zero_copy", "delete"]
    rc, rep, out = _check("strict", tmp_path, capsys)
    assert rc == 1 and rep["profile"] == "strict"
    failed = {k: t for k, t in rep["tests"].items() if t["outcome"] == "failed"}
    assert failed and all("test_default_scheme_isolates" in k for k in failed), sorted(failed)
    assert all("silently wrong KV" in t["reason"] for t in failed.values())
    assert "FAIL test_default_scheme_isolates [strict]" in out
