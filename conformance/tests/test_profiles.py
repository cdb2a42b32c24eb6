"""Profiles and inferred capabilities: a plain v1-only backend (no declaration, no v2,
keys per model and rank) passes ``contract`` and fails ``strict`` on the strict-only
geometry rule, with that rule's reason in the failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hicache_conformance import BackendSuite
from hicache_conformance.capabilities import default_profile, infer_capabilities
from plain_backend import PlainV1Backend

from hicache_sdk import Capabilities, PagedStorage

HERE = Path(__file__).parent


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


def _check(profile: str, tmp_path: Path) -> tuple[int, dict, str]:
    report = tmp_path / f"{profile}.json"
    code = (
        "import sys; from hicache_conformance.cli import main; "
        f"sys.exit(main(['plain_backend:PlainV1Backend', '--profile', '{profile}', "
        f"'--level', 'L1', '--matrix', 'minimal', '-q', '--report', r'{report}']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": str(HERE)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, json.loads(report.read_text()), proc.stdout


def test_contract_passes_strict_fails_with_the_rules_reason(tmp_path: Path) -> None:
    rc, rep, _ = _check("contract", tmp_path)
    assert rc == 0 and rep["ok"] is True and rep["profile"] == "contract"
    assert rep["capabilities"]["inferred"] == ["zero_copy", "delete"]
    rc, rep, out = _check("strict", tmp_path)
    assert rc == 1 and rep["profile"] == "strict"
    failed = {k: t for k, t in rep["tests"].items() if t["outcome"] == "failed"}
    assert failed and all("test_default_scheme_isolates" in k for k in failed), sorted(failed)
    assert all("silently wrong KV" in t["reason"] for t in failed.values())
    assert "FAIL test_default_scheme_isolates [strict]" in out
