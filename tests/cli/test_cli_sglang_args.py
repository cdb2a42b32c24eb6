"""``hicache sglang-args``: the printed flags construct the backend through the bridge, and
secrets go to a 0600 ``@file``, never to stdout."""

from __future__ import annotations

import json
import os
import shlex
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest

from hicache_sdk.cli import main
from hicache_sdk.config import parse_config_arg
from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.sglang import HiCacheSDKStorage
from hicache_sdk.spec import HiCacheStorageConfig

SALT = "s3cr3t-salt-" + uuid.uuid4().hex


def _flags(out: str) -> dict[str, str]:
    """``{flag: value}`` of the printed line, as a shell would split it."""
    words = shlex.split(out.strip())
    assert len(words) == 4, words
    return {words[0]: words[1], words[2]: words[3]}


def _bridge_from(value: str) -> HiCacheSDKStorage:
    """What SGLang 0.5.23 does with the flags: parse the extra config (inline JSON or
    ``@file``, parse_storage_backend_extra_config's rules), hand it to the dynamic loader,
    which constructs ``cls(storage_config, {})``."""
    extra = parse_config_arg(value)
    assert extra["module_path"] == "hicache_sdk.sglang" and extra["class_name"] == "HiCacheSDKStorage"
    return HiCacheSDKStorage(HiCacheStorageConfig(model_name="m", extra_config=extra), {})


def test_inline_flags_without_secrets_construct_the_backend(capsys: pytest.CaptureFixture[str]) -> None:
    store = f"args-{uuid.uuid4().hex}"
    try:
        assert main(["sglang-args", "memory", "--config", json.dumps({"store": store})]) == 0
        out, _err = capsys.readouterr()
        flags = _flags(out)
        assert flags["--hicache-storage-backend"] == "dynamic"
        value = flags["--hicache-storage-backend-extra-config"]
        assert not value.startswith("@")
        extra = json.loads(value)
        assert extra["backend"] == "memory" and extra["interface_v1"] == 1
        assert extra["backend_config"] == {"store": store}
        bridge = _bridge_from(value)
        assert isinstance(bridge.inner, MemoryStorage) and bridge.inner.config.store == store
        bridge.close()
    finally:
        drop_store(store)


def test_secret_moves_to_a_0600_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = f"args-{uuid.uuid4().hex}"
    cfg = json.dumps({"store": store, "namespace_salt": SALT})
    try:
        assert main(["sglang-args", "memory", "--config", cfg]) == 0
        out, err = capsys.readouterr()
        assert SALT not in out and SALT not in err
        assert "namespace_salt" in err  # the key's name, not its value
        value = _flags(out)["--hicache-storage-backend-extra-config"]
        assert value.startswith("@")
        path = Path(value[1:])
        assert path.parent == tmp_path and path.name == "hicache-sglang-memory.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert json.loads(path.read_text())["backend_config"]["namespace_salt"] == SALT
        bridge = _bridge_from(value)
        assert bridge.inner.config.namespace_salt == SALT
        bridge.close()
    finally:
        drop_store(store)


def test_existing_file_is_tightened_to_0600_and_json_output_redacts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "sglang-extra.json"
    target.write_text("{}")
    os.chmod(target, 0o644)
    cfg = json.dumps({"store": "x", "namespace_salt": SALT})
    assert main(["sglang-args", "memory", "--config", cfg, "--secret-file", str(target), "--json"]) == 0
    out, _ = capsys.readouterr()
    assert SALT not in out
    doc = json.loads(out)
    assert doc["secret_file"] == str(target) and doc["secret_keys"] == ["namespace_salt"]
    assert doc["extra_config"]["backend_config"] == {"store": "x", "namespace_salt": "***"}
    assert doc["args"][-1] == f"@{target}"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert json.loads(target.read_text())["backend_config"]["namespace_salt"] == SALT


def test_symlinked_secret_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    cfg = json.dumps({"namespace_salt": SALT})
    assert main(["sglang-args", "memory", "--config", cfg, "--secret-file", str(link)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and SALT not in err
    assert real.read_text() == "{}"
    assert err.strip() == (
        f"hicache sglang-args: --secret-file {link} is a symbolic link; refusing to write "
        "secrets through a link (it could point anywhere): remove it or choose another path"
    )
    assert "Errno" not in err and "Too many levels of symbolic links" not in err


def test_url_credentials_count_as_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("hicache_backend_redis")
    url = "redis://alice:pa55word@127.0.0.1:1/0"
    target = tmp_path / "redis.json"
    assert (
        main(["sglang-args", "redis", "--config", json.dumps({"url": url}), "--secret-file", str(target)])
        == 0
    )
    out, err = capsys.readouterr()
    assert "pa55word" not in out + err
    assert _flags(out)["--hicache-storage-backend-extra-config"] == f"@{target}"
    assert json.loads(target.read_text())["backend_config"]["url"] == url


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["sglang-args", "memory", "--config", '{"stor": "x"}'], "did you mean 'store'"),
        (["sglang-args", "no-such-backend"], "no-such-backend"),
        (["sglang-args", "memory", "--config", "{"], "not valid JSON"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], match: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert match in err and len(err.strip().splitlines()) == 1


def test_generic_only_backend_is_printed_with_interface_v1_off(capsys: pytest.CaptureFixture[str]) -> None:
    name = "test_sglang_bridge_checks:GenericOnly"
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sglang"))
    try:
        assert main(["sglang-args", name]) == 0
    finally:
        sys.path.pop(0)
    extra: Any = json.loads(_flags(capsys.readouterr().out)["--hicache-storage-backend-extra-config"])
    assert extra["interface_v1"] == 0 and extra["backend"] == name


def test_metrics_port_is_a_top_level_bridge_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sglang-args", "memory", "--metrics-port", "9400"]) == 0
    extra = json.loads(_flags(capsys.readouterr().out)["--hicache-storage-backend-extra-config"])
    assert extra["metrics_port"] == 9400 and "backend_config" not in extra
    assert main(["sglang-args", "memory", "--metrics-port", "70000"]) == 2
    assert "--metrics-port must be 0..65535" in capsys.readouterr().err


def test_linker_flags_and_refused_secret(capsys: pytest.CaptureFixture[str]) -> None:
    """``--linker``: SGLang's unified cache linker flags; a secret is refused (SGLang reads
    that config inline only), and its value never appears in the output."""
    assert main(["sglang-args", "memory", "--config", '{"store": "lk"}', "--linker"]) == 0
    words = shlex.split(capsys.readouterr().out.strip())
    assert words[:4] == [
        "--enable-unified-cache-external-linker",
        "--unified-cache-external-linker-backend",
        "dynamic",
        "--unified-cache-external-linker-config",
    ]
    assert json.loads(words[4]) == {
        "linker": "TransportLinker",
        "linker_module_path": "hicache_sdk.sglang.linker",
        "linker_extra_config": {"backend": "memory", "backend_config": {"store": "lk"}},
    }
    assert main(["sglang-args", "memory", "--config", json.dumps({"namespace_salt": SALT}), "--linker"]) == 2
    out = capsys.readouterr()
    assert "namespace_salt" in out.err and "environment" in out.err
    assert SALT not in out.out + out.err
