"""Config: every key SGLang 0.5.23's ``MooncakeStore`` reads, with its meaning, units,
defaults and source precedence (read from ``mooncake_store.py``: ``_load_config``,
``MooncakeStoreConfig.load_from_extra_config`` / ``from_file`` / ``load_from_env``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hicache_backend_mooncake import MooncakeConfig, MooncakeStorage, parse_size
from hicache_backend_mooncake.config import SGLANG_ENV, per_rank_segment_size
from hicache_backend_mooncake.storage import _rank_device, _rank_offload_path

from hicache_sdk import ConfigError, HiCacheStorageConfig

#: A config as SGLang's docs and users write it: every key its MooncakeStore reads.
SGLANG_CONFIG = {
    "master_server_address": "10.0.0.1:50051",
    "local_hostname": "10.0.0.2",
    "metadata_server": "P2PHANDSHAKE",
    "global_segment_size": "8gb",
    "protocol": "tcp",
    "device_name": "",
    "master_metrics_port": 19003,
    "check_server": False,
    "standalone_storage": False,
    "client_server_address": None,
    "enable_ssd_offload": False,
    "ssd_offload_path": None,
    "tenant_id": "team-a",
    "extra_backend_tag": "prod",
    "enable_group_semantics": False,
}


def test_sglang_defaults() -> None:
    c = MooncakeConfig.from_mapping({"master_server_address": "h:1"}, environ={})
    assert (c.protocol, c.metadata_server, c.device_name, c.local_hostname) == (
        "rdma",
        "P2PHANDSHAKE",
        "",
        "localhost",
    )
    assert c.segment_bytes == 4 << 30
    assert (c.master_metrics_port, c.check_server, c.standalone_storage) == (9003, False, False)
    assert (c.enable_ssd_offload, c.ssd_offload_path, c.client_server_address) == (False, None, None)
    assert (c.tenant_id, c.extra_backend_tag, c.enable_group_semantics) == ("default", None, False)
    assert c.unsupported() == []


def test_every_key_sglang_reads_is_accepted_with_its_value() -> None:
    c = MooncakeConfig.from_mapping(SGLANG_CONFIG, environ={})
    assert c.master_server_address == "10.0.0.1:50051" and c.local_hostname == "10.0.0.2"
    assert c.segment_bytes == 8 << 30 and c.protocol == "tcp" and c.master_metrics_port == 19003
    assert c.tenant_id == "team-a" and c.extra_backend_tag == "prod"
    assert set(SGLANG_ENV) | {"extra_backend_tag", "enable_group_semantics"} == set(SGLANG_CONFIG)


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("4gb", 4 << 30),  # SGLang: "<N>gb" is N * 2**30, any case
        ("4GB", 4 << 30),
        ("17179869184", 16 << 30),  # SGLang: a digit string is bytes
        (1 << 20, 1 << 20),
        ("512mb", 512 << 20),  # ours on top
        ("1 GB", 1 << 30),
        ("64KiB", 64 << 10),
        (0, 0),
    ],
)
def test_sizes(text: object, n: int) -> None:
    assert parse_size(text) == n
    c = MooncakeConfig.from_mapping({"master_server_address": "h:1", "global_segment_size": text}, environ={})
    assert c.segment_bytes == n


@pytest.mark.parametrize("bad", ["lots", "1.5gb", "-1", True])
def test_bad_size_names_the_key(bad: object) -> None:
    with pytest.raises(ConfigError, match="global_segment_size"):
        MooncakeConfig.from_mapping({"master_server_address": "h:1", "global_segment_size": bad}, environ={})


def test_master_required() -> None:
    with pytest.raises(ConfigError, match="MOONCAKE_MASTER"):
        MooncakeConfig.from_mapping({}, environ={})
    with pytest.raises(ConfigError, match="standalone"):  # SGLang's dummy-client form alone
        MooncakeConfig.from_mapping({"client_server_address": "127.0.0.1:50052"}, environ={})


def test_mapping_source_takes_sglang_defaults_not_the_environment() -> None:
    """load_from_extra_config: a key the mapping omits gets ``envs.X.default``, except
    ``protocol`` (``envs.MOONCAKE_PROTOCOL.get()``)."""
    env = {
        "MOONCAKE_DEVICE": "mlx5_9",
        "MOONCAKE_GLOBAL_SEGMENT_SIZE": "1gb",
        "MOONCAKE_MASTER_METRICS_PORT": "1234",
        "MOONCAKE_CHECK_SERVER": "true",
        "MOONCAKE_TENANT_ID": "env-tenant",
        "MOONCAKE_PROTOCOL": "tcp",
    }
    c = MooncakeConfig.from_mapping({"master_server_address": "m:4"}, environ=env)
    assert (c.device_name, c.segment_bytes, c.master_metrics_port) == ("", 4 << 30, 9003)
    assert (c.check_server, c.tenant_id, c.protocol) == (False, "default", "tcp")


def test_env_source_when_mapping_names_no_server() -> None:
    env = {
        "MOONCAKE_MASTER": "e:2",
        "MOONCAKE_PROTOCOL": "tcp",
        "MOONCAKE_GLOBAL_SEGMENT_SIZE": "17179869184",
        "MOONCAKE_CHECK_SERVER": "y",  # SGLang's EnvBool: true/1/yes/y
        "MOONCAKE_MASTER_METRICS_PORT": "19003",
        "MOONCAKE_TENANT_ID": "  ",
        "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": "/ssd",
    }
    c = MooncakeConfig.from_mapping({"key_scheme": "sglang-mooncake"}, environ=env)
    assert (c.master_server_address, c.protocol, c.segment_bytes) == ("e:2", "tcp", 16 << 30)
    assert (c.check_server, c.master_metrics_port, c.tenant_id) == (True, 19003, "default")
    assert (c.ssd_offload_path, c.key_scheme) == ("/ssd", "sglang-mooncake")
    with pytest.raises(ConfigError, match="MOONCAKE_CHECK_SERVER"):
        MooncakeConfig.from_mapping({}, environ={**env, "MOONCAKE_CHECK_SERVER": "maybe"})


def test_file_source_replaces_the_mappings_mooncake_keys(tmp_path: Path) -> None:
    f = tmp_path / "mc.json"
    f.write_text(
        json.dumps({"master_server_address": "f:3", "protocol": "tcp", "global_segment_size": "1gb"})
    )
    env = {"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(f), "MOONCAKE_MASTER": "e:2", "MOONCAKE_DEVICE": "x"}
    c = MooncakeConfig.from_mapping({"global_segment_size": "2gb", "device_name": "mlx5_1"}, environ=env)
    assert (c.master_server_address, c.protocol, c.segment_bytes, c.device_name) == (
        "f:3",
        "tcp",
        1 << 30,
        "",
    )
    f.write_text(json.dumps({"protocol": "tcp"}))
    with pytest.raises(ConfigError, match="neither master_server_address"):
        MooncakeConfig.from_mapping({}, environ=env)
    f.write_text("not json")
    with pytest.raises(ConfigError, match="cannot read JSON"):
        MooncakeConfig.from_mapping({}, environ=env)


def test_mapping_with_master_ignores_file(tmp_path: Path) -> None:
    f = tmp_path / "mc.json"
    f.write_text(json.dumps({"master_server_address": "f:3", "device_name": "mlx5_0"}))
    env = {"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(f)}
    c = MooncakeConfig.from_mapping({"master_server_address": "m:4"}, environ=env)
    assert (c.master_server_address, c.device_name) == ("m:4", "")


@pytest.mark.parametrize(
    ("env", "config", "expected"),
    [
        ({"LOCAL_HOSTNAME": "a", "MOONCAKE_LOCAL_HOSTNAME": "b"}, "c", "b"),
        ({"LOCAL_HOSTNAME": "a"}, "c", "a"),
        ({"LOCAL_HOSTNAME": ""}, "c", "c"),
        ({}, "c", "c"),
        ({}, "", "localhost"),
    ],
)
def test_local_hostname_precedence(env: dict[str, str], config: str, expected: str) -> None:
    c = MooncakeConfig.from_mapping({"master_server_address": "m:4", "local_hostname": config}, environ=env)
    assert c.local_hostname == expected


def test_bad_protocol_and_unknown_keys_with_a_close_match() -> None:
    with pytest.raises(ConfigError, match="protocol"):
        MooncakeConfig.from_mapping({"master_server_address": "m:4", "protocol": "TCP "}, environ={})
    with pytest.raises(ConfigError, match=r"'protocl' \(did you mean 'protocol'\?\)"):
        MooncakeConfig.from_mapping({"master_server_address": "m:4", "protocl": "tcp"}, environ={})
    with pytest.raises(ConfigError, match=r"'check_sever' \(did you mean 'check_server'\?\)"):
        MooncakeConfig.from_mapping({"master_server_address": "m:4", "check_sever": True}, environ={})


def test_keys_sglang_reads_but_we_ignore_are_listed() -> None:
    c = MooncakeConfig.from_mapping(
        {
            "master_server_address": "m:4",
            "standalone_storage": True,
            "client_server_address": "127.0.0.1:50052",
            "enable_group_semantics": True,
        },
        environ={},
    )
    got = c.unsupported()
    assert len(got) == 3
    assert [m.split("=")[0].split(" ")[0] for m in got] == [
        "standalone_storage",
        "client_server_address",
        "enable_group_semantics",
    ]


def test_unsupported_keys_are_warned_at_construction(caplog: pytest.LogCaptureFixture) -> None:
    """Construction needs no master (setup runs in the background): one WARNING per key."""
    cfg = HiCacheStorageConfig(
        extra_config={
            "master_server_address": "127.0.0.1:9",  # nothing listens: setup keeps failing
            "protocol": "tcp",
            "global_segment_size": 0,
            "standalone_storage": True,
            "enable_group_semantics": True,
            "setup_timeout_s": 0.05,
        }
    )
    with caplog.at_level(logging.WARNING, logger="hicache_backend_mooncake"):
        st = MooncakeStorage(cfg, {})
    try:
        texts = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("standalone_storage" in t for t in texts), texts
        assert any("enable_group_semantics" in t for t in texts), texts
    finally:
        st.close()


def test_segment_divided_per_rank_like_sglang() -> None:
    sc = HiCacheStorageConfig(tp_size=4, pp_size=2)
    assert per_rank_segment_size(8 << 30, sc) == 1 << 30


def test_device_name_json_per_tp_rank_like_sglang() -> None:
    table = json.dumps({"0": "mlx5_0", "1": "mlx5_1"})
    assert _rank_device(table, HiCacheStorageConfig(tp_rank=1, tp_size=2)) == "mlx5_1"
    assert _rank_device(table, HiCacheStorageConfig(tp_rank=3, tp_size=4)) == ""
    assert _rank_device("{not json", HiCacheStorageConfig()) == ""
    assert _rank_device("mlx5_2", HiCacheStorageConfig(tp_rank=1, tp_size=2)) == "mlx5_2"


def test_ssd_offload_path_per_rank_like_sglang(tmp_path: Path) -> None:
    sc = HiCacheStorageConfig(tp_rank=1, tp_size=2, pp_rank=0, pp_size=1, dp_rank=2)
    got = _rank_offload_path(str(tmp_path), sc)
    assert got == str(tmp_path / "rank_2_1_0_0") and Path(got).is_dir()
    assert _rank_offload_path(None, sc) is None


def test_capabilities_follow_the_segment() -> None:
    """A client holding a segment is not persistent (its pages go with the process)."""
    own, why = MooncakeStorage.capabilities_for_config({"master_server_address": "m:4"})
    assert not own.persistent and "global_segment_size > 0" in why["persistent"]
    pure, why = MooncakeStorage.capabilities_for_config(
        {"master_server_address": "m:4", "global_segment_size": 0}
    )
    assert pure.persistent and pure.shared_across_processes and why == {}
    assert MooncakeStorage.capabilities_for_config({}) == (MooncakeStorage.capabilities, {})


def test_without_mooncake_the_backend_is_listed_unavailable_with_the_install_command() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['mooncake'] = None; sys.modules['mooncake.store'] = None\n"
        "from hicache_sdk.registry import list_backends\n"
        "b = [b for b in list_backends() if b.name == 'mooncake'][0]\n"
        "print(b.importable); print(b.error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.splitlines()[0] == "False"
    assert "pip install 'hicache-backend-mooncake[cpu]'" in out
