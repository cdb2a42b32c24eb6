"""``hicache lmcache-args``: the printed ``--l2-adapter`` flag names our adapter with the
backend's settings, and secrets go to a 0600 ``@file``, never to stdout."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from hicache_sdk.cli import main
from hicache_sdk.lmcache import L2Settings

SALT = "s3cr3t-salt-" + uuid.uuid4().hex


def _spec(out: str) -> dict[str, object]:
    words = shlex.split(out.strip())
    assert len(words) == 2 and words[0] == "--l2-adapter", words
    spec = json.loads(words[1])
    assert isinstance(spec, dict)
    return spec


def test_flag_without_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lmcache-args", "memory", "--config", json.dumps({"store": "s1"})]) == 0
    spec = _spec(capsys.readouterr().out)
    assert (spec["type"], spec["module_path"], spec["class_name"]) == (
        "plugin",
        "hicache_sdk.lmcache",
        "L2Adapter",
    )
    settings = L2Settings.from_mapping(spec["adapter_params"])
    assert settings.backend == "memory" and dict(settings.backend_config) == {"store": "s1"}


def test_secret_moves_to_a_0600_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "lm.json"
    config = {"store": "s2", "namespace_salt": SALT}
    assert main(["lmcache-args", "memory", "--config", json.dumps(config), "--secret-file", str(path)]) == 0
    out, err = capsys.readouterr()
    assert SALT not in out and SALT not in err and "namespace_salt" in err
    spec = _spec(out)
    assert spec["adapter_params"] == {"backend": "memory", "backend_config": f"@{path}"}  # type: ignore[comparison-overlap]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    settings = L2Settings.from_mapping(spec["adapter_params"])
    assert dict(settings.backend_config) == config


def test_bad_config_and_unknown_backend_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lmcache-args", "memory", "--config", '{"no_such_key": 1}']) == 2
    assert "no_such_key" in capsys.readouterr().err
    assert main(["lmcache-args", "no-such-backend"]) == 2


def test_as_a_subprocess() -> None:
    exe = Path(sys.executable).with_name("hicache")
    out = subprocess.run(
        [str(exe), "lmcache-args", "memory", "--json"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["l2_adapter"]["adapter_params"] == {"backend": "memory"}
    assert json.loads(doc["args"][1]) == doc["l2_adapter"]


def test_connector_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    assert main(["lmcache-args", "memory", "--config", '{"store": "s3"}', "--plug", "connector"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["remote_url"] == "plugin://hicache" and doc["remote_storage_plugins"] == ["hicache"]
    extra = doc["extra_config"]
    assert extra["remote_storage_plugin.hicache.class_name"] == "ConnectorAdapter"
    params = extra["remote_storage_plugin.hicache.adapter_params"]
    assert L2Settings.from_mapping(params).backend_config == {"store": "s3"}
