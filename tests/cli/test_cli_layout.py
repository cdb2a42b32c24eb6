"""``hicache layout NAME``: the L3 object layout as JSON (the Mooncake backend's case is
tested in ``backends/mooncake/tests/test_mooncake_layout.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache_sdk.cli import main


def test_file_backend_under_sglang_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = json.dumps({"root": str(tmp_path / "c"), "key_scheme": "sglang-file"})
    code = main(["layout", "file", "--config", cfg, "--model", "org/m", "--tp-rank", "1", "--tp-size", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    layout = json.loads(out)
    assert layout["backend"] == "file" and layout["enabled"] is True
    assert layout["hicache_object_layout"]["pools"] == [
        {"pool": "kv", "suffixes": ["_org-m_1_2.bin"], "hit_policy": "all_pages"}
    ]


def test_file_backend_under_default_scheme_is_disabled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["layout", "file", "--config", json.dumps({"root": str(tmp_path / "c")})]) == 0
    layout = json.loads(capsys.readouterr().out)
    assert layout["enabled"] is False and "sglang-file" in layout["reason"]


def test_backend_without_a_layout_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["layout", "memory"]) == 1
    assert "does not describe an L3 object layout" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pool", "kv"], "the pool must be one of"),
        (["--pool", "swa:sometimes"], "the policy must be one of"),
        (["--page-size", "0"], "--page-size"),
        (["--config", '{"rooot": "/tmp/x"}'], "did you mean 'root'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["layout", "file", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
