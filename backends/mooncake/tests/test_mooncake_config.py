"""Config: SGLang's key names, defaults, human sizes and source precedence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hicache_backend_mooncake import MooncakeConfig, parse_size
from hicache_backend_mooncake.config import per_rank_segment_size

from hicache_sdk import ConfigError, HiCacheStorageConfig


def test_sglang_defaults() -> None:
    c = MooncakeConfig.from_mapping({"master_server_address": "h:1"}, environ={})
    assert (c.protocol, c.metadata_server, c.device_name) == ("rdma", "P2PHANDSHAKE", "")
    assert c.segment_bytes == 4 << 30
    assert c.master_metrics_port == 9003


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("4gb", 4 << 30),
        ("512mb", 512 << 20),
        ("1 GB", 1 << 30),
        ("64KiB", 64 << 10),
        ("65536", 65536),
        (0, 0),
    ],
)
def test_human_sizes(text: object, n: int) -> None:
    assert parse_size(text) == n


def test_bad_size_names_the_key() -> None:
    with pytest.raises(ConfigError, match="global_segment_size"):
        MooncakeConfig.from_mapping(
            {"master_server_address": "h:1", "global_segment_size": "lots"}, environ={}
        )


def test_master_required() -> None:
    with pytest.raises(ConfigError, match="MOONCAKE_MASTER"):
        MooncakeConfig.from_mapping({}, environ={})


def test_env_source_when_mapping_has_no_master() -> None:
    env = {
        "MOONCAKE_MASTER": "e:2",
        "MOONCAKE_PROTOCOL": "tcp",
        "MOONCAKE_GLOBAL_SEGMENT_SIZE": "17179869184",
    }
    c = MooncakeConfig.from_mapping({}, environ=env)
    assert (c.master_server_address, c.protocol, c.segment_bytes) == ("e:2", "tcp", 16 << 30)


def test_file_beats_mapping_without_master(tmp_path: Path) -> None:
    f = tmp_path / "mc.json"
    f.write_text(
        json.dumps({"master_server_address": "f:3", "protocol": "tcp", "global_segment_size": "1gb"})
    )
    env = {"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(f), "MOONCAKE_MASTER": "e:2"}
    c = MooncakeConfig.from_mapping({"global_segment_size": "2gb"}, environ=env)
    assert (c.master_server_address, c.protocol, c.segment_bytes) == ("f:3", "tcp", 1 << 30)


def test_mapping_with_master_ignores_file_but_env_fills_gaps(tmp_path: Path) -> None:
    f = tmp_path / "mc.json"
    f.write_text(json.dumps({"master_server_address": "f:3", "device_name": "mlx5_0"}))
    env = {"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(f), "MOONCAKE_PROTOCOL": "tcp"}
    c = MooncakeConfig.from_mapping({"master_server_address": "m:4"}, environ=env)
    assert (c.master_server_address, c.device_name, c.protocol) == ("m:4", "", "tcp")


def test_local_hostname_env_wins() -> None:
    env = {"LOCAL_HOSTNAME": "a", "MOONCAKE_LOCAL_HOSTNAME": "b"}
    c = MooncakeConfig.from_mapping({"master_server_address": "m:4", "local_hostname": "c"}, environ=env)
    assert c.local_hostname == "b"


def test_bad_protocol_and_unknown_key() -> None:
    with pytest.raises(ConfigError, match="protocol"):
        MooncakeConfig.from_mapping({"master_server_address": "m:4", "protocol": "udp"}, environ={})
    with pytest.raises(ConfigError, match="protocl"):
        MooncakeConfig.from_mapping({"master_server_address": "m:4", "protocl": "tcp"}, environ={})


def test_segment_divided_per_rank_like_sglang() -> None:
    sc = HiCacheStorageConfig(tp_size=4, pp_size=2)
    assert per_rank_segment_size(8 << 30, sc) == 1 << 30


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
