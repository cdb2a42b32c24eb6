"""The linker section of docs/compatibility.md (``scripts/compat/linker_table.py``): the page
holds what its run file renders to, and each verdict brings its finding."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "compat"))

import linker_table  # noqa: E402


def test_page_holds_the_last_linker_run() -> None:
    section = linker_table.render_linker()
    assert "| hicache-sdk TransportLinker | file" in section
    assert section in (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")


def test_rows_and_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = {
        "command": "python scripts/compat_matrix.py --linker",
        "date": "2026-01-01 00:00 UTC",
        "sglang": "0.5.23",
        "python": "3.11.7",
        "rows": [
            {"linker": "hicache-sdk TransportLinker", "store": "s3", "verdict": "fails", "reason": "a | b"},
            {
                "linker": "SGLang MooncakeDirectLinker",
                "store": "mooncake",
                "verdict": "refused",
                "reason": "x",
            },
            {"linker": "SGLang MooncakeDirectLinker", "store": "mamba", "verdict": "passes", "reason": "y"},
        ],
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run), encoding="utf-8")
    monkeypatch.setattr(linker_table, "RESULTS", path)
    text = linker_table.render_linker()
    assert "| hicache-sdk TransportLinker | s3 | fails | a \\| b |" in text
    assert "refuses plain models" in text  # the refused SGLang row's finding
    assert "serves the hybrid Mamba model" in text  # the passing one's
    assert "no longer loads" not in text  # no sglang-fs-linker row: no finding for it
    monkeypatch.setattr(linker_table, "RESULTS", tmp_path / "missing.json")
    assert "Not run yet" in linker_table.render_linker()
