"""FileConfig: defaults, SGLang names and environment variables, root precedence, sizes."""

from __future__ import annotations

import pytest
from hicache_backend_file import FileConfig, parse_size, resolve_root
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk.errors import ConfigError


def test_defaults() -> None:
    c = FileConfig.from_mapping({}, environ={})
    assert (c.root, c.io_threads, c.max_bytes, c.file_mode, c.dir_mode) == (None, 4, 0, 0o600, 0o700)
    assert c.transfer_timeout_s == 0.0 and c.fsync is False and c.enable_metadata_cache is False
    assert c.byte_limit == 0
    assert resolve_root(c, {}) == "/tmp/hicache"


def test_root_precedence() -> None:
    env = {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/e"}
    assert resolve_root(FileConfig(file_storage_path="/x"), env) == "/e"
    assert resolve_root(FileConfig(file_storage_path="/x"), {}) == "/x"
    assert resolve_root(FileConfig(root="/r", file_storage_path="/x"), env) == "/r"
    assert resolve_root(FileConfig(), {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": ""}) == "/tmp/hicache"
    c = FileConfig.from_mapping({}, environ={"HICACHE_FILE_ROOT": "/ours"})
    assert resolve_root(c, env) == "/ours"


def test_sglang_env_names() -> None:
    c = FileConfig.from_mapping(
        {},
        environ={
            "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE": "2Gi",
            "SGLANG_HICACHE_FILE_BACKEND_EVICTION_RATIO": "0.5",
            "SGLANG_HICACHE_FILE_BACKEND_ENABLE_METADATA_CACHE": "true",
            "SGLANG_HICACHE_FILE_BACKEND_METADATA_TTL": "-1",
        },
    )
    assert c.byte_limit == 2 << 30 and c.eviction_ratio == 0.5
    assert c.enable_metadata_cache and c.metadata_ttl == -1
    # the mapping wins over the environment; max_bytes wins over max_size
    c = FileConfig.from_mapping(
        {"max_size": "1k", "max_bytes": 7}, environ={"SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE": "2G"}
    )
    assert c.byte_limit == 7
    # SGLang's min_free_space watermark: parsed like max_size, from the mapping or its env var
    assert FileConfig.from_mapping({"min_free_space": "10G"}, environ={}).min_free_bytes == 10**10
    env = {"SGLANG_HICACHE_FILE_BACKEND_MIN_FREE_SPACE": "1Ki"}
    assert FileConfig.from_mapping({}, environ=env).min_free_bytes == 1024
    assert FileConfig.from_mapping({}, environ={}).min_free_bytes == 0
    with pytest.raises(ConfigError, match="min_free_space"):
        FileConfig.from_mapping({"min_free_space": "lots"}, environ={})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0),
        ("", 0),
        ("1k", 1000),
        ("25.6k", 25600),
        ("1Ki", 1024),
        ("3Gi", 3 << 30),
        ("200G", 200 * 10**9),
        (" 42 ", 42),
        (5, 5),
    ],
)
def test_parse_size(value: str | int, expected: int) -> None:
    assert parse_size(value) == expected


@pytest.mark.parametrize("bad", ["1.5Ki", "1g", "ten", "-5", "1.5GiB", "nan", "inf"])
def test_parse_size_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="max_size"):
        parse_size(bad)


def test_parse_size_mooncake_form() -> None:
    # SGLang's Mooncake settings write "4gb" for 4 * 2^30; the one core parser takes it.
    assert parse_size("4gb") == 4 << 30
    assert parse_size("1KB") == 1024


@given(st.integers(0, 10**6), st.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi"]))
def test_parse_size_property(n: int, suffix: str) -> None:
    mult = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}[suffix]
    assert parse_size(f"{n}{suffix}") == n * mult


@pytest.mark.parametrize(
    "mapping",
    [
        {"io_threads": 0},
        {"max_bytes": -1},
        {"eviction_ratio": 0},
        {"eviction_ratio": 1.5},
        {"file_mode": 0o400},
        {"dir_mode": 0o600},
        {"file_mode": 0o1777},
        {"metadata_ttl": -2},
        {"max_size": "lots"},
        {"root": ""},
        {"rooot": "/x"},
    ],
)
def test_invalid_config(mapping: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        FileConfig.from_mapping(mapping, environ={})
